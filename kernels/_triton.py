"""One place that imports Triton, so the rest of kernels/ works with or without it.

Contract:
- `HAS_TRITON` says whether `import triton` worked. Without it, `triton.jit` is a stand-in that
  returns an object raising a clear error when launched, so the kernel modules still import and
  their `*_ref` functions (plain PyTorch) keep working.
- On a machine without CUDA, compiled Triton cannot run at all, so before the first
  `import triton` we turn on Triton's CPU interpreter (`TRITON_INTERPRET=1`) unless the variable is
  already set. The interpreter must be chosen before triton is imported: Triton decides per
  `@triton.jit` function, at decoration time, including its own `tl.max`/`tl.sum`.
- `can_interpret()` tells whether the Triton path can run on CPU tensors in this process.

This module knows nothing about individual kernels.
"""

from __future__ import annotations

import functools
import os

import torch

if not torch.cuda.is_available():
    # Side effect, on CUDA-less machines only: lets Triton kernels run (slowly) on CPU tensors.
    os.environ.setdefault("TRITON_INTERPRET", "1")

try:
    import triton
    import triton.language as tl

    HAS_TRITON = True
    TRITON_IMPORT_ERROR: str | None = None
except ImportError as exc:  # triton ships with CUDA builds of torch, not with the CPU wheel
    HAS_TRITON = False
    TRITON_IMPORT_ERROR = repr(exc)

    class _MissingKernel:
        def __init__(self, fn):
            self.fn = fn

        def __getitem__(self, grid):
            raise RuntimeError(
                f"Triton kernel {self.fn.__name__} needs the `triton` package "
                f"({TRITON_IMPORT_ERROR}); use the torch backend (DIFFVOICE_KERNELS=torch)"
            )

    class _MissingTriton:
        @staticmethod
        def jit(fn=None, **_kwargs):
            if fn is None:
                return _MissingKernel
            return _MissingKernel(fn)

        @staticmethod
        def cdiv(a: int, b: int) -> int:
            return -(-a // b)

        @staticmethod
        def next_power_of_2(n: int) -> int:
            return 1 if n <= 1 else 1 << (n - 1).bit_length()

    class _MissingLanguage:
        constexpr = object  # only used in annotations of the stand-in kernels

    triton = _MissingTriton()  # type: ignore[assignment]
    tl = _MissingLanguage()  # type: ignore[assignment]


def can_interpret() -> bool:
    """True when Triton kernels in this process run under the CPU interpreter."""
    if not HAS_TRITON:
        return False
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.max, InterpretedFunction)


def num_sms(device: torch.device) -> int:
    """Streaming multiprocessors on `device` (a small constant off-GPU, to keep grids tiny)."""
    if device.type == "cuda":
        index = device.index if device.index is not None else torch.cuda.current_device()
        return _cuda_sms(index)
    return 1


@functools.cache
def _cuda_sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count
