"""Shared fixtures for voice tests: spoken audio, a random-weight engine, a live loopback server.

The LLM is `engine.testing.make_random_checkpoint` (random weights: its answers are gibberish
bytes, fine for plumbing) and the ASR is the committed random-weight tiny faster-whisper model in
tests/assets/whisper-tiny-random (transcripts are gibberish words). Everything else is real:
Silero VAD, pipecat pipeline, espeak-ng, uvicorn on 127.0.0.1, WebSocket clients.
"""

from __future__ import annotations

import os
import shutil
import sys

import pytest
from loguru import logger
from voice_fixtures import (  # noqa: F401  (re-exported for older imports)
    RANDOM_LLM,
    SCALE,
    TINY_WHISPER,
    LiveServer,
    _espeak_cli_pcm,
    _espeak_lib_pcm,
    scaled,
)

logger.remove()
logger.add(sys.stderr, level=os.environ.get("DIFFVOICE_TEST_LOG_LEVEL", "WARNING"))


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """speech(text, lead_silence=0.5, tail_silence=1.2) -> 16 kHz int16 PCM bytes."""
    cache = tmp_path_factory.mktemp("speech")
    have_cli = shutil.which("espeak-ng") and shutil.which("sox")

    def make(text: str, lead_silence: float = 0.5, tail_silence: float = 1.2, rate_wpm=150):
        pcm = (
            _espeak_cli_pcm(text, cache, rate_wpm) if have_cli else _espeak_lib_pcm(text, rate_wpm)
        )
        return bytes(int(16000 * lead_silence) * 2) + pcm + bytes(int(16000 * tail_silence) * 2)

    return make


@pytest.fixture(scope="session")
def random_engine(tmp_path_factory):
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-sdar", family="sdar")
    engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", max_running=8))
    engine.warmup()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def voice_state(random_engine, tmp_path_factory):
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    log = tmp_path_factory.mktemp("latency") / "turns.jsonl"
    config = ServeConfig(
        port=0, model="random-sdar", asr=str(TINY_WHISPER), stop_secs=0.4, latency_log=str(log),
        max_new_tokens=24, max_sessions=8,
    )  # fmt: skip
    asr = resolve_asr(config.asr, "cpu", no_speech_threshold=None, max_new_tokens=8)
    assert asr.kind == "whisper", asr.warnings
    return AppState.create(config, random_engine, asr=asr, llm_overrides=RANDOM_LLM)


@pytest.fixture(scope="module")
def live_server(voice_state):
    with LiveServer(voice_state) as server:
        yield server
