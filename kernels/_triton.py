"""One place that imports Triton, so the rest of kernels/ works with or without it.

Contract:
- `HAS_TRITON` says whether `import triton` worked. Without it, `triton.jit` is a stand-in that
  returns an object raising a clear error when launched, so the kernel modules still import and
  their `*_ref` functions (plain PyTorch) keep working.
- On a machine without CUDA, compiled Triton cannot run at all, so before the first
  `import triton` we turn on Triton's CPU interpreter (`TRITON_INTERPRET=1`) unless the variable is
  already set to something else. Triton decides per `@triton.jit` function, at decoration time,
  including its own `tl.max`/`tl.sum`; so when some other library (transformers does) imported
  triton first, we re-wrap triton.language's already-decorated helpers as interpreted functions,
  exactly what the import would have built with the variable set. Only without CUDA.
- `can_interpret()` tells whether the Triton path can run on CPU tensors in this process.

This module knows nothing about individual kernels.
"""

from __future__ import annotations

import functools
import os
import sys

import torch

_NO_CUDA = not torch.cuda.is_available()
if _NO_CUDA:
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


def _interpret_already_imported_triton() -> None:
    """Re-wrap triton.language's JIT helpers for the interpreter (see the module docstring)."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(tl.max, InterpretedFunction):
        return  # triton was imported with the interpreter on: nothing to do
    wrapped: dict[int, InterpretedFunction] = {}
    for name, module in list(sys.modules.items()):
        if module is None or not (name == "triton.language" or
                                  name.startswith("triton.language.")):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, JITFunction):
                if id(value) not in wrapped:
                    wrapped[id(value)] = InterpretedFunction(value.fn)
                setattr(module, attr, wrapped[id(value)])


if HAS_TRITON and _NO_CUDA and triton.knobs.runtime.interpret:
    _interpret_already_imported_triton()


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
