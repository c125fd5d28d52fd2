"""`diffvoice serve`: load the engine once, warm it up, resolve ASR/TTS offline, serve HTTP.

    diffvoice serve [--host 127.0.0.1] [--port 8000] [--model DIR]
                    [--asr auto|whisper|whisper-base|NAME|DIR|pocketsphinx] [--tts espeak|...]
                    [--stop-secs 0.5] [--config serve.yaml] ...

Flags map 1:1 onto voice.config.ServeConfig fields (env DIFFVOICE_<FIELD> and a YAML/JSON config
file work too). `add_arguments(parser)` and `run(args) -> int` are what engine.cli registers.
`build_app(state)` is the full app: voice.server.create_app plus the OpenAI-compatible router
(voice.openai_api) and, unless --api-only, the Twilio router (voice.telephony.twilio).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from diffvoice.voice.config import ServeConfig
from diffvoice.voice.config import add_arguments as _add_config_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    _add_config_arguments(parser)


def build_app(state):
    from loguru import logger

    from diffvoice.voice.server import create_app

    app = create_app(state)
    try:
        from diffvoice.voice.openai_api import make_router as openai_router

        app.include_router(openai_router(state))
    except Exception as e:  # an optional surface must not keep the voice demo from starting
        logger.warning(f"OpenAI-compatible API not mounted: {e!r}")
    if not state.config.api_only:
        try:
            from diffvoice.voice.telephony.twilio import make_router as twilio_router

            app.include_router(twilio_router(state))
        except Exception as e:
            logger.warning(f"Twilio routes not mounted: {e!r}")
    return app


def _configure_logging(level: str) -> None:
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=level.upper())


class StartupError(RuntimeError):
    """The model or the speech parts could not be loaded; the message says what to do."""


def load_state(config: ServeConfig, *, replica_id: str | None = None, metrics=None):
    """Load and warm the engine once, resolve ASR/TTS offline: everything one serving process
    holds (one per `diffvoice serve`, one per Ray Serve replica). Raises StartupError."""
    from loguru import logger

    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.voice.state import AppState

    if not Path(config.model).is_dir():
        raise StartupError(
            f"model directory {config.model} not found. Train/download the embedded model into "
            "models/receptionist-tiny (see README) or pass --model DIR."
        )
    started = time.perf_counter()
    try:
        engine = Engine.from_pretrained(config.model, EngineConfig(device=config.device))
    except Exception as e:
        raise StartupError(f"cannot load the model in {config.model}: {e}") from e
    engine.warmup()
    logger.info(
        f"engine: {engine.model_name} on {engine.device}, loaded and warmed up in "
        f"{time.perf_counter() - started:.1f}s"
    )
    try:
        state = AppState.create(config, engine, metrics=metrics)
    except BaseException:
        engine.close()
        raise
    state.replica_id = replica_id
    if state.asr is not None:
        logger.info(f"ASR: {state.asr.name} (loaded in {state.asr.load_secs:.1f}s)")
        prewarm = getattr(state.asr.model, "prewarm", None)
        if prewarm is not None:  # pocketsphinx: the first calls must not wait for decoders
            t = time.perf_counter()
            built = prewarm()
            logger.info(f"ASR: {built} more decoders ready in {time.perf_counter() - t:.1f}s")
        logger.info(f"TTS: {state.tts.name} at {state.tts.sample_rate} Hz")
    for warning in state.warnings:
        logger.warning(f"!!! {warning}")
    return state


def run(args: argparse.Namespace) -> int:
    try:
        config = ServeConfig.from_sources(args)
    except (ValueError, OSError) as e:
        print(f"diffvoice serve: {e}", file=sys.stderr)
        return 2
    _configure_logging(getattr(args, "log_level", "INFO") or "INFO")
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
        logger.info(f"serving {'the API' if config.api_only else 'the voice demo'} at {url}")
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
