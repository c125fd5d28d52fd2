"""Suite-wide settings. Without CUDA, Triton kernels run under Triton's CPU interpreter, which
must be chosen before triton is first imported (some test modules import it indirectly)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# --- one namespace (added by pkg-rename.sh) ---
# `python -m pytest` puts the repository root on sys.path, which makes the folders importable
# under their old top-level names: transformers, for one, probes `import kernels` (Hugging
# Face's package of that name) and would load a second copy of ours. Nothing needs the root on
# the path any more (diffvoice.* comes from the install), so take it off; then refuse to test
# another checkout's code.
import importlib.util as _ilu  # noqa: E402
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_repo = _Path(__file__).resolve().parents[1]
_sys.path[:] = [p for p in _sys.path if _Path(p or ".").resolve() != _repo]
_spec = _ilu.find_spec("diffvoice.engine")
if _spec is None or _Path(_spec.origin).resolve().parent != _repo / "engine":
    raise RuntimeError(
        f"`diffvoice.engine` resolves to {_spec.origin if _spec else None}, not {_repo}/engine: "
        f"install this checkout first: `python -m pip install --no-deps -e {_repo}`")
