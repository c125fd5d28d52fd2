"""Shared fixtures for voice tests: spoken audio, a random-weight engine, a live loopback server.

The LLM is `engine.testing.make_random_checkpoint` (random weights: its answers are gibberish
bytes, fine for plumbing) and the ASR is the committed random-weight tiny faster-whisper model in
tests/assets/whisper-tiny-random (transcripts are gibberish words). Everything else is real:
Silero VAD, pipecat pipeline, espeak-ng, uvicorn on 127.0.0.1, WebSocket clients.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from loguru import logger

ASSETS = Path(__file__).resolve().parent.parent / "assets"
TINY_WHISPER = ASSETS / "whisper-tiny-random"
SCALE = float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
# Sampled (seeded, so reproducible) answers from the random model: greedy decoding of random
# weights tends to repeat one byte-level token with no spaces, which the detokenizer holds back
# until the end; sampling gives several word-bounded deltas, like a real model's blocks.
RANDOM_LLM = {"temperature": 1.0, "seed": 7}

logger.remove()
logger.add(sys.stderr, level=os.environ.get("DIFFVOICE_TEST_LOG_LEVEL", "WARNING"))


def scaled(seconds: float) -> float:
    return seconds * SCALE


def _espeak_cli_pcm(text: str, out_dir: Path, rate_wpm: int) -> bytes:
    """espeak-ng CLI + sox -> 16 kHz mono int16 PCM (no header)."""
    key = abs(hash((text, rate_wpm)))
    raw_wav, pcm = out_dir / f"{key}.wav", out_dir / f"{key}.s16"
    if not pcm.exists():
        subprocess.run(["espeak-ng", "-s", str(rate_wpm), "-w", str(raw_wav), text], check=True)
        subprocess.run(
            ["sox", str(raw_wav), "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer",
             "-t", "raw", str(pcm)],
            check=True,
        )  # fmt: skip
    return pcm.read_bytes()


def _espeak_lib_pcm(text: str, rate_wpm: int) -> bytes:
    """Fallback without the CLI tools: espeak-ng via ctypes + soxr resampling."""
    import soxr

    from voice.espeak import Espeak

    es = Espeak.shared()
    audio = np.frombuffer(es.synthesize(text, rate_wpm=rate_wpm), dtype=np.int16)
    return soxr.resample(audio, es.sample_rate, 16000).astype(np.int16).tobytes()


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
    from engine import Engine, EngineConfig
    from engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-sdar", family="sdar")
    engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", max_running=8))
    engine.warmup()
    yield engine
    engine.close()


class LiveServer:
    """uvicorn serving create_app(state) on a free loopback port, in a background thread."""

    def __init__(self, state) -> None:
        import uvicorn

        from voice.server import create_app

        self.state = state
        self.app = create_app(state)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="warning", ws_max_size=1 << 20)
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def __enter__(self) -> LiveServer:
        self._thread.start()
        deadline = time.monotonic() + scaled(30)
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self._thread.join(timeout=scaled(15))
        self._sock.close()


@pytest.fixture(scope="module")
def voice_state(random_engine, tmp_path_factory):
    from voice.asr import resolve_asr
    from voice.config import ServeConfig
    from voice.state import AppState

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
