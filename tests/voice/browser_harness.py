"""Helpers for the real-browser tests (tests/voice/test_browser.py).

- `make_spoken_wav`: a 16 kHz mono PCM16 WAV of espeak-ng speech with silence around it, for
  Chromium's fake microphone (`--use-file-for-fake-audio-capture=FILE%noloop` plays it once;
  the trailing silence is what lets the server's VAD see the end of the turn).
- `chromium_args`: the flags for headless Debian Chromium with that fake microphone.
- `LoopbackServer`: runs an ASGI app under uvicorn on 127.0.0.1 (a free port) in a background
  thread, so a sync playwright test can talk to it; `stop()` shuts it down like Ctrl-C would.
- `artifacts_dir`: where screenshots go (artifacts/browser/ in the repo root, git-ignored).

Nothing here knows about the diffvoice server's internals.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path

import uvicorn

REPO_ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")


def timeout_scale() -> float:
    """DIFFVOICE_TEST_TIMEOUT_SCALE (default 1): multiply every test timeout by it."""
    return float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))


def missing_tools() -> list[str]:
    """What a browser test needs that this machine lacks (empty when all is there)."""
    missing = [] if CHROMIUM.exists() else [f"{CHROMIUM} (Debian package chromium)"]
    missing += [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright Python package")
    return missing


def make_spoken_wav(path: Path, text: str, *, lead_s: float = 1.5, tail_s: float = 8.0) -> Path:
    """espeak-ng speech -> 16 kHz mono 16-bit WAV with `lead_s`/`tail_s` seconds of silence."""
    raw = path.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(raw), text], check=True)
    subprocess.run(
        ["sox", str(raw), "-r", "16000", "-c", "1", "-b", "16", str(path),
         "pad", str(lead_s), str(tail_s)],
        check=True,
    )
    raw.unlink()
    return path


def chromium_args(fake_mic_wav: Path | None = None) -> list[str]:
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--use-fake-ui-for-media-stream",  # accept the mic prompt
        "--use-fake-device-for-media-stream",
    ]
    if fake_mic_wav is not None:
        args.append(f"--use-file-for-fake-audio-capture={fake_mic_wav}%noloop")
    return args


def artifacts_dir() -> Path:
    path = REPO_ROOT / "artifacts" / "browser"
    path.mkdir(parents=True, exist_ok=True)
    return path


class LoopbackServer:
    """uvicorn serving `app` on 127.0.0.1:<free port> from a daemon thread."""

    def __init__(self, app, *, start_timeout_s: float = 30.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=5)
        self.server = uvicorn.Server(config)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"uvicorn-{self.port}", daemon=True)
        self.thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"test server failed to start: {self.error!r}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"test server not up after {start_timeout_s} s")
            time.sleep(0.05)

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as e:  # surfaced by __init__ / stop()
            self.error = e

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout_s: float = 30.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout_s)
        self.sock.close()
        if self.thread.is_alive():
            raise RuntimeError("test server did not shut down")

    def __enter__(self) -> LoopbackServer:
        return self

    def __exit__(self, *exc) -> None:
        if self.thread.is_alive():
            self.stop()
