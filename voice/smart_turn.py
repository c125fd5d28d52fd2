"""Smart Turn v3.2 (pipecat's bundled 8 MB CPU ONNX model): how likely the caller's turn is
complete, judged from the sound of their last 8 s (intonation, a drawn-out "um", a cut-off word).

pipecat's `LocalSmartTurnAnalyzerV3` loads its own ONNX session and starts a thread per call,
and it empties its audio buffer whenever it judges a turn complete, which is not what a strategy
that weighs sound *with* meaning wants. Here one analyzer per process holds the session, each call
keeps its own audio (`TurnAudio`), and predictions run on a small shared pool:

    audio = TurnAudio(sample_rate)        # per call: append(pcm) / clear() / pcm()
    p = await shared_smart_turn().probability(audio.pcm(), audio.sample_rate)   # 0..1

`probability` resamples 8 kHz (telephone) audio to the model's 16 kHz. Knows nothing about
frames or turns.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

MODEL_RATE = 16000
MAX_SECS = 8.0  # the model reads the last 8 s (pipecat pads shorter audio with zeros in front)

_lock = threading.Lock()
_shared: SmartTurn | None = None


class TurnAudio:
    """The caller's audio of the current turn: the last `max_secs` of int16 PCM."""

    def __init__(self, sample_rate: int, max_secs: float = MAX_SECS) -> None:
        self.sample_rate = sample_rate
        self._max = int(sample_rate * max_secs) * 2
        self._buf = bytearray()

    def append(self, pcm: bytes) -> None:
        self._buf += pcm
        if len(self._buf) > self._max:
            del self._buf[: len(self._buf) - self._max]

    def clear(self) -> None:
        self._buf.clear()

    @property
    def secs(self) -> float:
        return len(self._buf) / 2 / self.sample_rate

    def pcm(self) -> np.ndarray:
        return np.frombuffer(bytes(self._buf), dtype=np.int16)


class SmartTurn:
    """One Smart Turn v3.2 session for every call; `probability` may run concurrently."""

    def __init__(self, threads: int = 2) -> None:
        from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3

        self._analyzer = LocalSmartTurnAnalyzerV3()  # loads the bundled model, once
        self._analyzer.set_sample_rate(MODEL_RATE)
        self._pool = ThreadPoolExecutor(threads, thread_name_prefix="smart-turn")

    def predict(self, pcm: np.ndarray, sample_rate: int) -> float:
        """P(turn complete) for int16 PCM at `sample_rate` (blocking, ~10-20 ms on a CPU)."""
        audio = pcm.astype(np.float32) / 32768.0
        if sample_rate != MODEL_RATE:
            import soxr

            audio = soxr.resample(audio, sample_rate, MODEL_RATE, quality="HQ")
        if not len(audio):
            return 0.0
        return float(self._analyzer._predict_endpoint(audio)["probability"])

    async def probability(self, pcm: np.ndarray, sample_rate: int) -> float:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self.predict, pcm, sample_rate)


def shared_smart_turn() -> SmartTurn:
    global _shared
    with _lock:
        if _shared is None:
            _shared = SmartTurn()
        return _shared
