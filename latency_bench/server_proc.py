"""Start `diffvoice serve` on a free loopback port for a benchmark run, and stop it after.

Contract: `with LocalServer(extra_args, start_timeout_s, env) as server:` runs
`python -c "from diffvoice.engine.cli import main; ..." serve --host 127.0.0.1 --port P
<extra_args>` in
its own process (so server and load client do not share a GIL or an event loop), waits until
GET /healthz answers 200, and exposes `server.base_url` ("http://127.0.0.1:P"),
`server.ws_url(path)` and `server.log_path`. If the process exits or does not become healthy
in time, `ServerStartError` carries the tail of its log. On exit the process gets SIGTERM,
then SIGKILL after 20 s; the log file is kept only if the run failed (or `keep_log()` was
called). `server.bench_url(protocol)` is what a load client connects to: the browser WebSocket
or the Twilio voice webhook. `bench_server(protocol, extra_args, start_timeout_s, token)`
builds a LocalServer for a protocol: for Twilio it signs webhooks with `token` (a fresh one
when None) and gives the server its own address as --public-url, since signatures cover the
URL the client POSTs to; it returns (server, token or None).
"""

from __future__ import annotations

import os
import secrets
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_LAUNCH = "import sys; from diffvoice.engine.cli import main; sys.exit(main())"


class ServerStartError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class LocalServer:
    def __init__(self, extra_args: str | Sequence[str] = (), start_timeout_s: float = 600.0,
                 env: Mapping[str, str] | None = None) -> None:
        self.extra_args = shlex.split(extra_args) if isinstance(extra_args, str) else list(
            extra_args)
        self.start_timeout_s = start_timeout_s
        self.env = dict(env or {})
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}"
        self.process: subprocess.Popen | None = None
        self.log_path: Path | None = None
        self.latency_log: Path | None = None  # the server's latency log (Twilio runs)
        self.owns_latency_log = False  # a temp file of the bench's: removed after reading
        self._failed = False

    def ws_url(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def bench_url(self, protocol: str) -> str:
        if protocol == "realtime":
            return self.ws_url("/v1/realtime")
        return (self.ws_url("/ws") if protocol == "browser"
                else self.base_url + "/telephony/twilio/voice")

    def log_tail(self, lines: int = 40) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def command(self) -> list[str]:
        """The server's command line: `diffvoice [--log-level L] serve --host --port <extra>`
        (`--log-level` among the extra args is diffvoice's own option, moved before serve)."""
        args, top = list(self.extra_args), []
        if "--log-level" in args[:-1]:
            i = args.index("--log-level")
            top, args[i:i + 2] = args[i:i + 2], []
        return [sys.executable, "-c", _LAUNCH, *top, "serve", "--host", "127.0.0.1",
                "--port", str(self.port), *args]

    def __enter__(self) -> LocalServer:
        handle, name = tempfile.mkstemp(prefix="diffvoice-bench-server-", suffix=".log")
        self.log_path = Path(name)
        command = self.command()
        with os.fdopen(handle, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env={**os.environ, **self.env})
        try:
            self._wait_healthy()
        except BaseException:
            self._failed = True
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise ServerStartError(f"`diffvoice serve` exited with {self.process.returncode}"
                                       f" before it was healthy; log {self.log_path}:\n"
                                       f"{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/healthz", timeout=5) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        raise ServerStartError(f"`diffvoice serve` not healthy after {self.start_timeout_s:.0f}"
                               f" s; log {self.log_path}:\n{self.log_tail()}")

    def keep_log(self) -> None:
        """Keep the log file after the run (a caller's run failed without an exception here)."""
        self._failed = True

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        if exc_type is not None:
            self._failed = True
        if not self._failed and self.log_path is not None:
            self.log_path.unlink(missing_ok=True)


def bench_server(protocol: str, extra_args: str | Sequence[str], start_timeout_s: float,
                 twilio_auth_token: str | None = None) -> tuple[LocalServer, str | None]:
    if protocol != "twilio":
        return LocalServer(extra_args, start_timeout_s), None
    token = twilio_auth_token or secrets.token_hex(16)
    server = LocalServer(extra_args, start_timeout_s, {"TWILIO_AUTH_TOKEN": token})
    server.extra_args += ["--public-url", server.base_url]
    # Media Streams carry audio only: the turns' server records come from the latency log,
    # the one the server args name, else a temp file of the bench's own
    args, given = server.extra_args, None
    for i, a in enumerate(args):
        if a == "--latency-log" and i + 1 < len(args):
            given = args[i + 1]
        elif a.startswith("--latency-log="):
            given = a.split("=", 1)[1]
    if given is not None:
        server.latency_log = Path(given)
    else:
        handle, name = tempfile.mkstemp(prefix="diffvoice-bench-latency-", suffix=".jsonl")
        os.close(handle)
        server.latency_log, server.owns_latency_log = Path(name), True
        server.extra_args += ["--latency-log", name]
    return server, token


def server_health(url: str) -> dict[str, Any]:
    """The server's /healthz JSON (model, asr, tts, stop_secs, ...), or {} if it has none."""
    import json
    import urllib.parse
    import urllib.request

    parts = urllib.parse.urlsplit(url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    health = urllib.parse.urlunsplit((scheme, parts.netloc, "/healthz", "", ""))
    try:
        with urllib.request.urlopen(health, timeout=10) as response:
            data = json.loads(response.read().decode("utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    keys = ("model", "asr", "tts", "stop_secs", "output_sample_rate", "warnings",
            "machine", "versions")  # the last two: the server describes itself (--url mode)
    return {k: data[k] for k in keys if data.get(k) is not None}
