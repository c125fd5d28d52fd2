"""Suite-wide settings. Without CUDA, Triton kernels run under Triton's CPU interpreter, which
must be chosen before triton is first imported (some test modules import it indirectly)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
