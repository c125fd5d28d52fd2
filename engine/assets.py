"""Where diffvoice's shipped files are: the default model and the browser page.

One function per asset, used by every command (`generate`, `chat`, `serve`, `train`,
`eval-model`) and by the server, so a source checkout, an editable install and a wheel install
all find the same files:

- In a source checkout (this file's grandparent holds diffvoice's pyproject.toml; an editable
  install also runs from here) the assets are the repository's own folders: `models/`, `web/`.
- In a wheel install they are package data of the `diffvoice` distribution (pyproject.toml maps
  the `diffvoice` package onto the repository root and ships `models/receptionist-tiny/*` and
  `web/*` under it), found with importlib.resources. (The fact sheet is the agent's:
  agent/facts.py.)

Checking the source checkout first means a worktree runs with its own files even when the
shared environment's editable install points at another checkout. Knows nothing about models
or pages beyond their file names.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

DATA_PACKAGE = "diffvoice"           # the package whose data holds models/ and web/
DEFAULT_MODEL_NAME = "receptionist-tiny"
_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def source_root() -> Path | None:
    """The repository root when running from a source checkout (or editable install), else None."""
    pyproject = _SOURCE_ROOT / "pyproject.toml"
    try:
        is_ours = pyproject.is_file() and 'name = "diffvoice"' in pyproject.read_text("utf-8")
    except OSError:
        is_ours = False
    return _SOURCE_ROOT if is_ours else None


def _packaged(*parts: str) -> Path:
    """A file or folder shipped as package data of DATA_PACKAGE, as a real filesystem path."""
    try:
        root = importlib.resources.files(DATA_PACKAGE)
    except ModuleNotFoundError as e:
        raise FileNotFoundError(
            f"diffvoice's data package {DATA_PACKAGE!r} is not installed (a broken install?): "
            f"cannot locate {'/'.join(parts)}") from e
    target = root
    for part in parts:  # one at a time: Python 3.11's MultiplexedPath.joinpath takes one
        target = target.joinpath(part)
    # A wheel installs plain files, so the Traversable is a pathlib.Path (or, for a namespace
    # package, a MultiplexedPath whose children are Paths); zipped installs are not supported.
    return Path(str(target))


def asset_path(*parts: str) -> Path:
    """`parts` relative to the repository root (source checkout) or the data package (wheel)."""
    root = source_root()
    return root.joinpath(*parts) if root is not None else _packaged(*parts)


def default_model_dir() -> Path:
    """The embedded default model: models/receptionist-tiny."""
    return asset_path("models", DEFAULT_MODEL_NAME)


def web_dir() -> Path:
    """The browser voice demo served at /: web/ (index.html and its scripts)."""
    return asset_path("web")

