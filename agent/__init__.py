"""The demo agent (a dental-office receptionist): its domain and its serving rules.

Arrows: kernels <- engine <- agent <- voice. `agent.train` (its training recipe and evaluation)
sits above what it uses."""
