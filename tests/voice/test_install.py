"""A normal (wheel) install finds its own model and page: build, install, run from elsewhere.

What this test does, exactly:
1. Copies the source tree (git's tracked and untracked-but-not-ignored files) to a temp dir and
   builds the wheel there with `pip wheel --no-deps --no-build-isolation` (offline; setuptools
   comes from the test's environment).
2. Creates a fresh venv with the base interpreter's stock pip (`python -m venv`, i.e. ensurepip:
   pip 23.2.1 for Python 3.11.7 here) and installs the wheel with `pip install --no-deps`.
3. To stay fast and offline, the heavy dependencies (torch, pipecat, ...) are not downloaded:
   a .pth file in the fresh venv points at a folder of symlinks to the test environment's
   installed packages (every sys.path folder holding dist-infos, outside this checkout), minus
   anything of diffvoice's own (its editable-install finder,
   .pth files and dist-info), so the project itself can only come from the wheel. `pip check`
   (stock pip) then checks that the wheel's pinned requirements are met by those packages.
4. From an unrelated directory, with a clean PYTHONPATH: `diffvoice generate --prompt ...`
   answers with the shipped default model; `diffvoice serve` serves the page at / and answers
   one spoken turn over the browser protocol (espeak-ng speech in, transcript + bot text +
   bot audio out), and its modules are the wheel's (checked via /healthz and `python -c`).
Resolving the pins from an index with pip 23.2 is not done here (it needs the network and a
minute); docs/voice.md ("Install as a package") says how that was checked.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from voice_client import connect, send_pcm
from voice_fixtures import scaled

from diffvoice.latency_bench.server_proc import free_port
from diffvoice.voice.transport import protocol

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(scaled(900)))]
_OUR_NAMES = {"diffvoice", "engine", "voice", "kernels", "latency_bench", "models", "web"}
_OUR_PREFIXES = ("diffvoice-", "__editable__", "_diffvoice")


def _run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, **kw)
    assert out.returncode == 0, (f"{cmd} -> {out.returncode}\n{out.stdout[-3000:]}\n"
                                 f"{out.stderr[-3000:]}")
    return out


def _source_files() -> list[str]:
    out = _run(["git", "-C", str(REPO), "ls-files", "--cached", "--others", "--exclude-standard",
                "-z"])
    return [f for f in out.stdout.split("\0") if f and (REPO / f).is_file()]


def _site_dirs() -> list[Path]:
    """The test interpreter's package folders: sys.path entries holding dist-infos, outside
    this checkout (so a venv whose own .pth points at the shared packages works too)."""
    dirs = []
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        # the checkout's own folders, but not a venv that lives inside it (make test's .venv)
        inside_repo = path == REPO or (REPO in path.parents and "site-packages" not in path.parts)
        if path.is_dir() and not inside_repo and next(path.glob("*.dist-info"), None):
            dirs.append(path)
    return dirs


def _deps_view(tmp: Path) -> Path:
    """Symlinks to this environment's installed packages, without any of diffvoice's own."""
    view = tmp / "deps-view"
    view.mkdir()
    for site in _site_dirs():
        for entry in site.iterdir():
            name = entry.name
            if (name.endswith(".pth") or name in _OUR_NAMES or name.startswith(_OUR_PREFIXES)
                    or name == "__pycache__" or (view / name).exists()):
                continue  # the first folder on sys.path wins, as it does for imports
            (view / name).symlink_to(entry)
    return view


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel-install")
    src = tmp / "src"
    for rel in _source_files():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / rel, src / rel)
    dist = tmp / "dist"
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
          "-w", str(dist), str(src)], timeout=scaled(300))
    wheel = next(dist.glob("diffvoice-*.whl"))

    venv = tmp / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    _run([base, "-m", "venv", str(venv)], timeout=scaled(300))
    py = venv / "bin" / "python"
    pip_version = _run([str(py), "-m", "pip", "--version"]).stdout.split()[1]
    venv_site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"]).stdout.strip())
    (venv_site / "zz-deps.pth").write_text(str(_deps_view(tmp)) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PIP_NO_INDEX"] = "1"
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], env=env,
         timeout=scaled(300))
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    return {"venv": venv, "py": py, "env": env, "cwd": elsewhere, "pip": pip_version,
            "site": venv_site}


def test_wheel_has_its_data_and_its_pins_are_met(installed):
    py, env, cwd = installed["py"], installed["env"], installed["cwd"]
    check = subprocess.run([str(py), "-m", "pip", "check"], capture_output=True, text=True,
                           env=env, cwd=cwd, timeout=scaled(120))
    ours = [line for line in check.stdout.splitlines() if line.lower().startswith("diffvoice")]
    assert not ours, f"pip {installed['pip']} check: {ours}"
    probe = ("import json; from diffvoice.engine import assets; "
             "from diffvoice.voice import config; from diffvoice.agent import facts; "
             "print(json.dumps([assets.__file__, config.__file__, "
             "str(assets.default_model_dir()), str(assets.web_dir()), "
             "str(facts.default_facts_path())]))")
    paths = json.loads(_run([str(py), "-c", probe], env=env, cwd=cwd).stdout)
    site = str(installed["site"])
    assert all(p.startswith(site) for p in paths), paths
    assert (Path(paths[2]) / "model.safetensors").is_file()
    assert (Path(paths[3]) / "index.html").is_file()
    assert Path(paths[4]).is_file()



def test_one_namespace_beside_a_users_own_voice_package(installed, tmp_path):
    """The wheel installs only `diffvoice` (no top-level engine/voice/kernels/latency_bench), so
    an app with its own `voice/` package imports both (the issue's `voice.llm_service` case)."""
    site = Path(installed["site"])
    record = next(site.glob("diffvoice-*.dist-info")) / "RECORD"
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines()}
    tops = {t for t in tops if not t.startswith("diffvoice-") and t != "../.."}
    assert tops <= {"diffvoice", "bin", ".."} and "diffvoice" in tops, tops
    app = tmp_path / "app"
    (app / "voice").mkdir(parents=True)
    (app / "voice" / "__init__.py").write_text('WHO = "the app"\n')
    probe = ("import voice; from diffvoice.voice.llm_service import DiffusionLLMService; "
             "print(voice.WHO, DiffusionLLMService.__module__)")
    out = _run([str(installed["py"]), "-c", probe], env=installed["env"], cwd=app).stdout
    assert out.split() == ["the", "app", "diffvoice.voice.llm_service"], out

def test_generate_from_another_directory(installed):
    out = _run([str(installed["venv"] / "bin" / "diffvoice"), "generate", "--prompt",
                "when do you open", "--max-new-tokens", "32"], env=installed["env"],
               cwd=installed["cwd"], timeout=scaled(300))
    assert any(c.isalpha() for c in out.stdout), out.stdout


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=scaled(10)) as response:
        return response.read()


def _turn_done(call) -> bool:
    return call.has(protocol.Latency) and call.audio_frames > 0 and call.has(protocol.BotText)


async def _spoken_turn(ws_url: str, pcm: bytes):
    async with connect(ws_url, config={"stop_secs": 0.5}, until=_turn_done) as (ws, call, done):
        await send_pcm(ws, pcm)
        await asyncio.wait_for(done.wait(), scaled(120))
    return call


def test_serve_page_and_one_spoken_turn(installed, speech, tmp_path):
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen([str(installed["venv"] / "bin" / "diffvoice"), "serve", "--host",
                             "127.0.0.1", "--port", str(port), "--asr", "pocketsphinx",
                             "--max-new-tokens", "24"],
                            stdout=log, stderr=subprocess.STDOUT, env=installed["env"],
                            cwd=installed["cwd"])
    base = f"http://127.0.0.1:{port}"
    try:
        health = None
        for _ in range(int(scaled(300) / 0.5)):
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()[-3000:]
            try:
                health = json.loads(_get(base + "/healthz"))
                break
            except OSError:
                time.sleep(0.5)
        assert health is not None and health["status"] == "ok"
        assert b"<html" in _get(base + "/").lower()
        call = asyncio.run(_spoken_turn(f"ws://127.0.0.1:{port}/ws",
                                        speech("what time do you open on saturday")))
        assert call.of(protocol.Transcript) or call.of(protocol.BotText)
        assert "".join(e.text for e in call.of(protocol.BotText)).strip()
        assert call.audio_frames > 0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=scaled(30))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
