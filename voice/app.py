"""One serving process: `load_state(config)` loads and warms the engine and resolves ASR/TTS
offline; `build_app(state)` is the full app: voice.server.create_app plus the OpenAI-compatible
router (voice.openai_api) and, unless --api-only, the Twilio router (voice.telephony.twilio).
Used by `diffvoice serve` (voice.cli_serve), its worker processes and Ray Serve replicas
(voice.scale)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from diffvoice.voice.config import ServeConfig


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


def configure_logging(level: str) -> None:
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
