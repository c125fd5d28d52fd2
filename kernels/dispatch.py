"""Choose between a Triton kernel and its plain-PyTorch reference.

Contract: `resolve_backend(device, backend)` returns "triton" or "torch".
- `backend` (a function argument) wins; else env `DIFFVOICE_KERNELS`; else "auto".
- "auto": Triton on CUDA tensors when triton is importable, the reference everywhere else
  (CPU engine runs never touch the interpreter, even when TRITON_INTERPRET=1 is set).
- "triton": forced. On CUDA it compiles; on CPU it runs under Triton's interpreter
  (TRITON_INTERPRET=1 before triton's first import; kernels/_triton.py sets it on CUDA-less
  machines), otherwise a clear RuntimeError.
- "torch": the reference, on any device.
It knows nothing about what the kernels compute.
"""

from __future__ import annotations

import os

import torch

from diffvoice.kernels._triton import HAS_TRITON, TRITON_IMPORT_ERROR, can_interpret

BACKENDS = ("auto", "triton", "torch")
ENV_VAR = "DIFFVOICE_KERNELS"


def requested_backend(backend: str | None = None) -> str:
    """The backend asked for: the argument, else $DIFFVOICE_KERNELS, else "auto"."""
    choice = backend if backend is not None else os.environ.get(ENV_VAR, "auto")
    choice = choice.strip().lower()
    if choice not in BACKENDS:
        source = "backend argument" if backend is not None else f"${ENV_VAR}"
        raise ValueError(f"{source} must be one of {BACKENDS}, got {choice!r}")
    return choice


def resolve_backend(device: torch.device | str, backend: str | None = None) -> str:
    """"triton" or "torch" for tensors on `device` (see the module docstring)."""
    device = torch.device(device)
    choice = requested_backend(backend)
    if choice == "torch":
        return "torch"
    if choice == "auto":
        return "triton" if (device.type == "cuda" and HAS_TRITON) else "torch"
    if not HAS_TRITON:
        raise RuntimeError(f"kernels backend 'triton' requested but triton is missing: "
                           f"{TRITON_IMPORT_ERROR}")
    if device.type != "cuda" and not can_interpret():
        raise RuntimeError(
            f"kernels backend 'triton' on {device.type} tensors needs Triton's interpreter: set "
            "TRITON_INTERPRET=1 before triton is first imported (it was imported without it)"
        )
    return "triton"
