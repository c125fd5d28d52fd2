"""Run reliability parts against a fresh `diffvoice serve` and write docs/reliability.md.

Contract:
- `SCALES["short"|"full"]`: every count and duration the parts use (short: make test, about a
  minute; full: the committed figures, including the 10-minute soak).
- `server_args(scale)`: the serve flags the harness server runs with (its limits are part of the
  report).
- `await run_parts(parts, scale, prompts) -> dict`: starts one LocalServer (pocketsphinx ASR,
  the embedded model, Twilio on with a random token, --public-url its own URL, the receptionist's
  appointment book in a temporary directory: `ctx.settings["appointments_db"]`), runs the parts
  in order, each under a time bound, and returns {"parts": {name: result}, "server": {...}}. A
  part that raises is recorded as a failed check, never hidden. The server log is scanned for
  tracebacks, "Task was destroyed but it is pending" and pipeline-shutdown timeouts; it is kept
  (its `path` in "server_log") when a check failed or the server exited early
  (`server_exit_code`).
- `write(results, out)`: merges into `<out>.json` (parts run earlier are kept) and renders the
  markdown `out` (latency_bench.reliability.report).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any

from diffvoice.latency_bench.reliability.common import Ctx, check, health, task_names
from diffvoice.latency_bench.reliability.scales import PARTS, SCALES  # noqa: F401 (re-exported)


def server_args(scale: dict[str, Any], model: str) -> list[str]:
    return ["--model", model, "--asr", "pocketsphinx", "--device", "cpu",
            "--max-new-tokens", str(scale["max_new_tokens"]),
            "--max-sessions", str(scale["max_sessions"]),
            "--max-sessions-per-ip", str(scale["per_ip"]),
            "--max-phone-calls", str(scale["max_phone_calls"]),
            "--idle-timeout-s", str(scale["idle_timeout_s"]),
            "--handshake-timeout-s", str(scale["handshake_timeout_s"]),
            "--header-timeout-s", str(scale["header_timeout_s"]),
            "--body-timeout-s", str(scale["sg_body_timeout_s"]),
            "--api-client-concurrency", str(scale["api_client_concurrency"]),
            *(["--input-frame-ms", str(scale["input_frame_ms"])]
              if scale.get("input_frame_ms") else []),
            *(["--workers", str(scale["workers"])] if (scale.get("workers") or 1) > 1 else [])]


_LOG_PATTERNS = {
    "tracebacks": r"Traceback \(most recent call last\)",
    "task_destroyed_pending": r"Task was destroyed but it is pending",
    "pipeline_shutdown_timeouts": r"pipeline shutdown",
    "errors_logged": r"\| ERROR ",
    "worker_restarts": r"exited with .*: restarting it",  # serve --workers (voice.scale.workers)
}


def scan_log(text: str) -> dict[str, Any]:
    """Counts of each pattern, plus up to 3 examples (the matching line and the next 6)."""
    lines = text.splitlines()
    out: dict[str, Any] = {k: len(re.findall(p, text)) for k, p in _LOG_PATTERNS.items()}
    examples = []
    for i, line in enumerate(lines):
        if any(re.search(p, line) for p in _LOG_PATTERNS.values()) and len(examples) < 3:
            examples.append("\n".join(lines[max(0, i - 2): i + 6])[:1500])
    out["examples"] = examples
    return out


async def _part(name: str, ctx: Ctx, scale: dict) -> dict[str, Any]:
    import importlib

    module = importlib.import_module(f"diffvoice.latency_bench.reliability.{name}")
    t0 = time.monotonic()
    try:
        result = await asyncio.wait_for(module.run(ctx, scale), scale["part_timeout_s"])
    except Exception as e:  # a part that breaks is a failed check, not a hidden one
        result = {"checks": [{"name": f"{name} ran to the end", "ok": False,
                              "detail": f"{type(e).__name__}: {e}"[:300]}]}
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    try:
        result["tasks_after"] = await task_names(ctx)
    except Exception as e:
        result["tasks_after"] = repr(e)
    return result


async def run_parts(parts, scale: dict, prompts, model: str) -> dict[str, Any]:
    from diffvoice.latency_bench.server_proc import LocalServer

    token = secrets.token_hex(16)
    book_dir = tempfile.TemporaryDirectory(prefix="diffvoice-reliability-book-")
    server = LocalServer(server_args(scale, model), start_timeout_s=600,
                         env={"TWILIO_AUTH_TOKEN": token})
    # the calls' tool calls book into a throw-away appointment book, not the model directory's
    server.extra_args += ["--public-url", server.base_url,
                          "--appointments-db", str(Path(book_dir.name) / "appointments.sqlite3")]
    out: dict[str, Any] = {"parts": {}, "scale": scale["name"],
                           "server_args": " ".join(server.extra_args)}
    load = {"start": [round(x, 2) for x in os.getloadavg()]}
    with server:
        ctx = Ctx(server, prompts, token)
        info = await health(ctx)
        ctx.settings = {"model_name": info["model"], "model_dir": model,
                        "appointments_db": str(Path(book_dir.name) / "appointments.sqlite3"),
                        **scale}
        out["server"] = {k: info.get(k) for k in ("model", "asr", "tts", "stop_secs",
                                                  "max_sessions")}
        restarts = 0
        for name in parts:
            out["parts"][name] = await _part(name, ctx, scale)
            load[f"after_{name}"] = [round(x, 2) for x in os.getloadavg()]
            # a worker that died and was restarted (serve --workers) is a crash too
            text = server.log_path.read_text(errors="replace") if server.log_path else ""
            now = len(re.findall(_LOG_PATTERNS["worker_restarts"], text))
            exited = server.process.poll() if server.process is not None else None
            out["parts"][name].setdefault("checks", []).append(check(
                "the server (every worker) stayed up", now == restarts and exited is None,
                f"{now - restarts} worker restarts" + (f", server exited {exited}"
                                                       if exited is not None else "")))
            restarts = now
        log = server.log_path.read_text(errors="replace") if server.log_path else ""
        died = server.process.poll() if server.process is not None else None
        kept = {}
        if died is not None or any(not c["ok"] for part in out["parts"].values()
                                   for c in part.get("checks", [])):
            server.keep_log()  # kept for the post-mortem
            kept["path"] = str(server.log_path)
        if died is not None:  # the server exited during the run (negative: killed by a signal)
            kept["server_exit_code"] = died
    book_dir.cleanup()
    out["server_log"] = {**scan_log(log), **kept}
    out["load_average"] = load  # 1/5/15-min load of this 2-core machine (other work included)
    return out


def write(results: dict[str, Any], out: Path, command: str, machine: dict) -> dict:
    from diffvoice.latency_bench.reliability.report import render

    json_path = out.with_suffix(".json")
    merged = json.loads(json_path.read_text()) if json_path.exists() else {"parts": {}}
    merged["parts"].update(results["parts"])
    for name in results["parts"]:
        merged.setdefault("runs", {})[name] = {
            "command": command, "server_args": results["server_args"],
            "server": results.get("server"), "server_log": results.get("server_log"),
            "load_average": results.get("load_average"),
            "machine": machine, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    json_path.parent.mkdir(parents=True, exist_ok=True)
    json_path.write_text(json.dumps(merged, indent=1, default=str) + "\n")
    out.write_text(render(merged))
    return merged
