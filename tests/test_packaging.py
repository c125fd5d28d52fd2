"""pyproject.toml ships every code package and the data the commands need.

The package list is explicit (the `diffvoice` data package is mapped onto the repository root,
which package discovery cannot express), so a new subpackage must be added to it by hand: this
test fails until it is. The wheel itself is built and run in tests/voice/test_install.py.
"""

import tomllib
from pathlib import Path

from diffvoice.agent.facts import default_facts_path
from diffvoice.engine.assets import default_model_dir, source_root, web_dir

REPO = Path(__file__).resolve().parents[1]


def _setuptools() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _folder(package: str, package_dir: dict[str, str]) -> Path:
    """The folder setuptools takes `package` from (longest package-dir prefix wins)."""
    parts = package.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in package_dir:
            return (REPO / package_dir[prefix]).joinpath(*parts[n:]).resolve()
    return REPO.joinpath(*parts).resolve()


def test_every_folder_with_an_init_is_a_listed_package():
    config = _setuptools()
    listed = {_folder(p, config.get("package-dir", {})) for p in config["packages"]}
    code_roots = [d for d in REPO.iterdir() if (d / "__init__.py").is_file()]
    assert code_roots
    found = {init.parent.resolve() for root in code_roots for init in root.rglob("__init__.py")}
    missing = sorted(str(f.relative_to(REPO)) for f in found - listed)
    assert not missing, f"add these folders to [tool.setuptools] packages: {missing}"


def test_assets_resolve_to_this_checkout():
    assert source_root() == REPO
    assert (default_model_dir() / "config.json").is_file()
    assert (web_dir() / "index.html").is_file()
    assert default_facts_path().is_file()
    data = _setuptools()["package-data"]
    shipped = {"models": data["diffvoice.models"], "web": data["diffvoice.web"]}
    assert shipped == {"models": [f"{default_model_dir().name}/*"], "web": ["*"]}
