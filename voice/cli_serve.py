"""`diffvoice serve`: load the engine once, warm it up, resolve ASR/TTS offline, serve HTTP.

    diffvoice serve [--host 127.0.0.1] [--port 8000] [--model DIR]
                    [--asr auto|whisper|whisper-base|NAME|DIR|pocketsphinx] [--tts espeak|...]
                    [--stop-secs 0.5] [--config serve.yaml] ...

Flags map 1:1 onto voice.config.ServeConfig fields (env DIFFVOICE_<FIELD> and a YAML/JSON config
file work too). `add_arguments(parser)` and `run(args) -> int` are what engine.cli registers.
The app and the state it serves are voice.app's (`build_app`, `load_state`, re-exported here).
"""

from __future__ import annotations

import argparse
import sys

from diffvoice.voice.app import StartupError, build_app, configure_logging, load_state  # noqa: F401
from diffvoice.voice.config import ServeConfig
from diffvoice.voice.config import add_arguments as _add_config_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_config_arguments(parser)


def run(args: argparse.Namespace) -> int:
    try:
        config = ServeConfig.from_sources(args)
    except (ValueError, OSError) as e:
        print(f"diffvoice serve: {e}", file=sys.stderr)
        return 2
    configure_logging(getattr(args, "log_level", "INFO") or "INFO")
    from loguru import logger

    if config.ray:
        from diffvoice.voice.scale.ray_serve import run_ray

        return run_ray(config)
    if config.workers > 1:
        from diffvoice.voice.scale.workers import run_workers

        return run_workers(config, log_level=getattr(args, "log_level", "INFO") or "INFO")

    import uvicorn

    from diffvoice.voice import malloc_tune

    if config.malloc_arena_max:
        malloc_tune.limit_arenas(config.malloc_arena_max)
    if config.switch_interval_ms:
        # a busy event loop holds the GIL for a whole switch interval before another thread
        # gets it: at Python's 5 ms the shared VAD pool fell behind 32 callers' audio
        sys.setswitchinterval(config.switch_interval_ms / 1000.0)
    try:
        state = load_state(config)
    except StartupError as e:
        logger.error(str(e))
        return 2
    try:
        app = build_app(state)
        url = f"http://{config.host}:{config.port}/"
        logger.info(f"starting {'the API' if config.api_only else 'the voice demo'} at {url}: "
                    "it takes calls once warm (a 'ready' line follows; GET /healthz says ok)")
        for line in twilio_banner(config):
            logger.info(line)
        from diffvoice.voice.http_limits import uvicorn_options

        # header / keep-alive timeouts, concurrency limit, WebSocket keepalive: see http_limits
        uvicorn.run(app, host=config.host, port=config.port, **uvicorn_options(config))
    finally:
        state.engine.close()
    return 0


def twilio_banner(config: ServeConfig) -> list[str]:
    """The Twilio start-up banner (docs/telephony.md): the URLs to paste into the Twilio console
    and any security warning, when Twilio is configured (an auth token, a public URL, or
    signature checks turned off) and the voice routes are served; else nothing."""
    from diffvoice.voice.telephony.config import TelephonyConfig, webhook_banner

    telephony = TelephonyConfig.from_serve_config(config)
    configured = bool(telephony.twilio_auth_token or telephony.public_url
                      or not telephony.twilio_validate)
    if config.api_only or not configured:
        return []
    return webhook_banner(telephony).splitlines()
