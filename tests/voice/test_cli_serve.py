"""`diffvoice serve` wiring: clear exit on a bad model dir; the app mounts every surface."""

from __future__ import annotations

import argparse

from voice_fixtures import TINY_WHISPER

from diffvoice.voice import cli_serve
from diffvoice.voice.config import ServeConfig


def _paths(routes) -> set[str]:
    """Route paths, looking inside included routers (newer FastAPI keeps them lazily)."""
    out = set()
    for route in routes:
        inner = getattr(route, "original_router", None)
        out |= _paths(inner.routes) if inner is not None else {getattr(route, "path", None)}
    return out


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli_serve.add_arguments(parser)
    return parser.parse_args(argv)


def test_missing_model_exits_with_a_message(tmp_path, capsys):
    assert cli_serve.run(_args(["--model", str(tmp_path / "nope")])) == 2
    err = capsys.readouterr().err
    assert f"--model {tmp_path / 'nope'}: no such directory" in err
    assert "Train/download" not in err  # the flag was given: no advice to pass it
    assert cli_serve.run(_args(["--stop-secs", "99"])) == 2
    assert "stop_secs" in capsys.readouterr().err


def test_an_unknown_recogniser_is_an_error_not_another_recogniser(tmp_path, capsys):
    """`--asr whisper-tiny` (a typo for whisper-tiny.en) stops the server with one line naming
    it, instead of serving calls on pocketsphinx with a warning."""
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path / "m", family="sdar")
    assert cli_serve.run(_args(["--model", str(ckpt), "--asr", "whisper-tiny",
                                "--device", "cpu"])) == 2
    err = capsys.readouterr().err
    assert "--asr 'whisper-tiny'" in err and "whisper-tiny.en" in err, err
    assert "Traceback" not in err


def test_one_log_format_for_loguru_and_the_standard_library(capfd):
    import logging

    from loguru import logger

    from diffvoice.voice.app import configure_logging

    configure_logging("INFO")
    try:
        logging.getLogger("diffvoice.engine.worker").warning("from the standard library")
        logger.warning("from loguru")
        logging.getLogger("quiet").debug("below the level")
    finally:
        logging.basicConfig(force=True)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "from " in ln]
    assert len(lines) == 2, lines
    shapes = [ln.split(" | ")[1].strip() for ln in lines]
    assert shapes == ["WARNING", "WARNING"], lines
    assert "diffvoice.engine.worker - from the standard library" in lines[0]


def test_build_app_mounts_voice_api_and_telephony_routes(random_engine):
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.state import AppState

    config = ServeConfig(model="random", asr=str(TINY_WHISPER))
    state = AppState.create(config, random_engine, asr=resolve_asr(config.asr, "cpu"))
    paths = _paths(cli_serve.build_app(state).routes)
    assert {"/ws", "/healthz", "/metrics", "/v1/chat/completions"} <= paths
    assert any(p and p.startswith("/telephony/twilio") for p in paths)

    api_only = AppState.create(config.replace(api_only=True), random_engine)
    assert api_only.asr is None and api_only.tts is None
    paths = _paths(cli_serve.build_app(api_only).routes)
    assert "/v1/chat/completions" in paths and "/ws" not in paths


def test_serve_prints_the_twilio_banner_when_twilio_is_configured(tmp_path, capfd, monkeypatch):
    """`diffvoice serve` (run() itself; only uvicorn.run is replaced so the process returns)
    logs the URLs to paste into Twilio, as docs/telephony.md promises."""
    import uvicorn

    from diffvoice.engine.testing import make_random_checkpoint

    model = make_random_checkpoint(tmp_path / "m", family="sdar")
    served = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.append(kw["port"]))
    monkeypatch.delenv("TWILIO_AUTH_TOKEN", raising=False)
    base = ["--model", str(model), "--asr", str(TINY_WHISPER), "--device", "cpu", "--port", "8123"]
    public = ["--public-url", "https://voice.example.com", "--twilio-auth-token", "secret-token"]
    assert cli_serve.run(_args(base + public)) == 0 and served == [8123]
    err = capfd.readouterr().err
    assert "https://voice.example.com/telephony/twilio/voice" in err
    assert "wss://voice.example.com/telephony/twilio/stream" in err
    assert "secret-token" not in err

    assert cli_serve.run(_args(base)) == 0  # no Twilio settings: no banner
    assert "telephony/twilio/voice" not in capfd.readouterr().err


def test_serve_sets_the_interpreter_switch_interval(tmp_path, monkeypatch):
    """--switch-interval-ms (default 1) is applied to the serving process before uvicorn runs;
    0 keeps Python's own."""
    import sys

    import uvicorn

    from diffvoice.engine.testing import make_random_checkpoint

    model = make_random_checkpoint(tmp_path / "m", family="sdar")
    seen = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append(sys.getswitchinterval()))
    before = sys.getswitchinterval()
    base = ["--model", str(model), "--asr", str(TINY_WHISPER), "--device", "cpu"]
    try:
        assert cli_serve.run(_args(base)) == 0
        sys.setswitchinterval(before)
        assert cli_serve.run(_args(base + ["--switch-interval-ms", "2.5"])) == 0
        sys.setswitchinterval(before)
        assert cli_serve.run(_args(base + ["--switch-interval-ms", "0"])) == 0
    finally:
        sys.setswitchinterval(before)
    assert seen[0] == 0.001 and seen[1] == 0.0025 and seen[2] == before
    assert cli_serve.run(_args(base + ["--switch-interval-ms", "-1"])) == 2


def test_serve_gives_uvicorn_the_slow_client_limits(tmp_path, monkeypatch):
    """Issue 39 item 8: `diffvoice serve` runs uvicorn with a request-head timeout, a keep-alive
    timeout and a concurrency limit sized from --max-sessions (voice.http_limits)."""
    import uvicorn

    from diffvoice.engine.testing import make_random_checkpoint
    from diffvoice.voice.http_limits import HeaderTimeoutMixin

    model = make_random_checkpoint(tmp_path / "m", family="sdar")
    seen = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append(kw))
    base = ["--model", str(model), "--asr", str(TINY_WHISPER), "--device", "cpu",
            "--max-sessions", "20", "--connection-headroom", "30", "--header-timeout-s", "4",
            "--keep-alive-timeout-s", "2"]
    assert cli_serve.run(_args(base)) == 0
    options = seen[0]
    assert issubclass(options["http"], HeaderTimeoutMixin)
    assert options["http"].header_timeout_s == 4.0
    assert options["timeout_keep_alive"] == 2.0 and options["limit_concurrency"] == 50
    assert options["ws_max_size"] == 1 << 20 and options["ws_ping_interval"] == 20.0
