"""pyproject.toml ships every code package and the data the commands need.

The package list is explicit (the `diffvoice` data package is mapped onto the repository root,
which package discovery cannot express), so a new subpackage must be added to it by hand: this
test fails until it is. The wheel itself is built and run in tests/voice/test_install.py.
"""

import tomllib
from pathlib import Path

from engine.assets import default_facts_path, default_model_dir, source_root, web_dir

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def test_every_folder_with_an_init_is_a_listed_package():
    listed = set(_setuptools()["packages"])
    mapping = _setuptools().get("package-dir", {})
    code_roots = [p for p in listed if "." not in p and p not in mapping]
    found = {".".join(init.parent.relative_to(REPO).parts)
             for root in code_roots for init in (REPO / root).rglob("__init__.py")}
    assert found - listed == set(), f"add these to [tool.setuptools] packages: {found - listed}"


def test_assets_resolve_to_this_checkout():
    assert source_root() == REPO
    assert (default_model_dir() / "config.json").is_file()
    assert (web_dir() / "index.html").is_file()
    assert default_facts_path().is_file()
    data = _setuptools()["package-data"]
    shipped = {"models": data["diffvoice.models"], "web": data["diffvoice.web"]}
    assert shipped == {"models": [f"{default_model_dir().name}/*"], "web": ["*"]}
