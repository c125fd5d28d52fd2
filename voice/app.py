"""One serving process: `load_state(config)` loads and warms the engine and resolves ASR/TTS
offline; `build_app(state)` is the full app: voice.server.create_app plus the OpenAI-compatible
router (voice.openai_api) and, unless --api-only, the Twilio router (voice.telephony.twilio).
Used by `diffvoice serve` (voice.cli_serve), its worker processes and Ray Serve replicas
(voice.scale)."""

from __future__ import annotations

import logging
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


LOG_FORMAT = ("<green>{time:YYYY-MM-DD HH:mm:ss.SSS}</green> | <level>{level: <8}</level> | "
              "<cyan>{name}</cyan> - <level>{message}</level>")


def configure_logging(level: str) -> None:
    """One log format for the whole process: loguru's sink (pipecat's and ours), with the
    standard library's records (the engine, uvicorn, Ray) routed into it."""
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level=level.upper(), format=LOG_FORMAT)
    logging.basicConfig(handlers=[_ToLoguru()], level=level.upper(), force=True)


class _ToLoguru(logging.Handler):
    """A standard-library record, written by loguru under the record's own logger name."""

    def emit(self, record: logging.LogRecord) -> None:
        from loguru import logger

        try:
            level = logger.level(record.levelname).name
        except ValueError:
            level = record.levelno
        logger.patch(lambda r: r.update(name=record.name)).opt(
            exception=record.exc_info).log(level, record.getMessage())


class StartupError(RuntimeError):
    """The model or the speech parts could not be loaded; the message says what to do."""


def load_state(config: ServeConfig, *, replica_id: str | None = None, metrics=None):
    """Load and warm the engine once, resolve ASR/TTS offline: everything one serving process
    holds (one per `diffvoice serve`, one per Ray Serve replica). Raises StartupError."""
    from loguru import logger

    from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig
    from diffvoice.voice.state import AppState

    if not Path(config.model).is_dir():
        if Path(config.model).resolve() == DEFAULT_MODEL_DIR.resolve():
            raise StartupError(
                f"the embedded model is missing ({config.model}): reinstall diffvoice, or pass "
                "--model DIR (a checkpoint directory; see docs/checkpoints.md)")
        raise StartupError(f"--model {config.model}: no such directory (a checkpoint directory "
                           "holds config.json and the weights; see docs/checkpoints.md)")
    started = time.perf_counter()
    try:
        engine_config = EngineConfig(device=config.device, reserved_slots=config.reserved_slots)
        engine = Engine.from_pretrained(config.model, engine_config)
    except Exception as e:
        raise StartupError(f"cannot load the model in {config.model}: {e}") from e
    engine.warmup()
    logger.info(
        f"engine: {engine.model_name} on {engine.device}, loaded and warmed up in "
        f"{time.perf_counter() - started:.1f}s"
    )
    try:
        state = AppState.create(config, engine, metrics=metrics)
    except ValueError as e:  # a setting that names nothing usable (--asr, --tts, ...)
        engine.close()
        raise StartupError(str(e)) from None
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
