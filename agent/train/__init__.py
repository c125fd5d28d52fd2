"""The receptionist's training recipe and evaluation (`diffvoice train`, `eval-model`)."""
