"""`diffvoice train`: the (add_arguments, run) pair for the CLI registry; the code lives in
agent.train.cli (add_train_arguments / run_train), next to `diffvoice eval-model`."""

from diffvoice.agent.train.cli import add_train_arguments as add_arguments
from diffvoice.agent.train.cli import run_train as run

__all__ = ["add_arguments", "run"]
