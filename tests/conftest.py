"""Suite-wide settings. Without CUDA, Triton kernels run under Triton's CPU interpreter, which
must be chosen before triton is first imported (some test modules import it indirectly)."""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Servers and tools the tests start keep their appointment books in the user's data directory
# (platformdirs): point it at a fresh folder, inherited by the servers they spawn.
import tempfile as _tempfile  # noqa: E402

os.environ["XDG_DATA_HOME"] = _tempfile.mkdtemp(prefix="diffvoice-test-data-")

# --- one namespace ---
# `python -m pytest` puts the repository root on sys.path, which makes the code folders
# importable under their old top-level names: transformers, for one, probes `import kernels`
# (Hugging Face's package of that name) and would load a second copy of ours. The root stays on
# the path (tests import shared helpers as `tests.voice...`), but a finder placed first answers
# the four old names from everywhere except the root; then refuse to test another checkout's code.
import importlib.machinery as _ilm  # noqa: E402
import importlib.util as _ilu  # noqa: E402
import sys as _sys  # noqa: E402
from pathlib import Path as _Path  # noqa: E402

_repo = _Path(__file__).resolve().parents[1]


class _NotFromTheRoot:
    """Meta-path finder: `engine`, `voice`, `kernels`, `latency_bench` never load from the root."""

    names = frozenset({"engine", "voice", "kernels", "latency_bench"})

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if path is not None or name not in cls.names:
            return None
        elsewhere = [p for p in _sys.path if _Path(p or ".").resolve() != _repo]
        spec = _ilm.PathFinder.find_spec(name, elsewhere)
        if spec is None:
            raise ModuleNotFoundError(f"No module named {name!r} (diffvoice's is diffvoice.{name})",
                                      name=name)
        return spec


_sys.meta_path.insert(0, _NotFromTheRoot)
_spec = _ilu.find_spec("diffvoice.engine")
if _spec is None or _Path(_spec.origin).resolve().parent != _repo / "engine":
    raise RuntimeError(
        f"`diffvoice.engine` resolves to {_spec.origin if _spec else None}, not {_repo}/engine: "
        f"install this checkout first: `python -m pip install --no-deps -e {_repo}`")


# --- parallel runs (`make test` runs `pytest -n 4 --dist loadfile`, see the Makefile) ---
# Most of the suite waits on real-time audio, servers and sockets (one process kept ~0.6 of
# this 2-core machine busy), so four workers share the two cores. Each worker's torch gets its
# share of the cores, so CPU-bound tests in different workers do not oversubscribe them.
import json as _json  # noqa: E402

_worker = os.environ.get("PYTEST_XDIST_WORKER")
if _worker is not None:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _workers))

# The modules' measured seconds (tests/durations.json, from `pytest --junitxml` on the 2-core
# machine; refresh it with tests/durations.py): the longest modules are handed out first, so a
# long module never starts last and runs alone at the end. Modules not listed go last, in the
# order pytest collected them. The order changes nothing else: each module still runs whole on
# one worker, in its own order.
_DURATIONS = _Path(__file__).with_name("durations.json")


def pytest_collection_modifyitems(config, items):
    try:
        seconds = _json.loads(_DURATIONS.read_text())
    except (OSError, ValueError):
        return
    def weight(item) -> float:
        try:
            rel = str(_Path(item.fspath).resolve().relative_to(_repo))
        except ValueError:
            return 0.0
        return float(seconds.get(rel, 0.0))

    items.sort(key=lambda item: -weight(item))  # stable: same-module order is kept
