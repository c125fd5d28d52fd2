"""One namespace: every diffvoice module is imported as diffvoice.X, once, from this checkout.

A module imported under its old top-level name (`engine.params` beside `diffvoice.engine.params`)
would be a second copy with its own classes and globals; an editable install that points at
another checkout would test that checkout's code. Run by the whole suite, after collection, so
every test module's imports are in sys.modules.
"""

import sys
from pathlib import Path

import diffvoice.engine
import diffvoice.kernels
import diffvoice.latency_bench
import diffvoice.voice

OLD = {"engine", "voice", "kernels", "latency_bench"}
REPO = Path(__file__).resolve().parents[1]


def _ours(module) -> bool:
    """Whether `module` was loaded from one of this checkout's code folders."""
    folders = [str(REPO / name) for name in OLD]
    paths = [getattr(module, "__file__", None) or "", *(getattr(module, "__path__", None) or [])]
    return any(str(p).startswith(folder) for p in paths for folder in folders)


def test_no_module_under_an_old_top_level_name():
    # (a namespace package made of a tests/ folder of the same name, e.g. tests/kernels when a
    # third-party probe such as transformers' `import kernels` runs, holds none of our code)
    old = sorted(name for name, module in list(sys.modules.items())
                 if name.split(".")[0] in OLD and _ours(module))
    assert not old, f"imported under old names (a second copy): {old[:10]}"


def test_packages_are_this_checkouts_folders():
    for module in (diffvoice.engine, diffvoice.voice, diffvoice.kernels, diffvoice.latency_bench):
        folder = Path(module.__file__).resolve().parent
        assert folder == REPO / module.__name__.split(".")[1], (module.__name__, folder)


def test_old_names_do_not_resolve_to_our_folders():
    # the repository root is on sys.path under pytest; the conftest's finder keeps the old
    # top-level names from loading our folders a second time
    import importlib.util

    for name in sorted(OLD):
        try:
            spec = importlib.util.find_spec(name)
        except ModuleNotFoundError:
            continue
        assert spec is None or not str(spec.origin or "").startswith(str(REPO / name)), name
