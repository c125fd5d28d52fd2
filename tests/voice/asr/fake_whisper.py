"""A stand-in for voice.asr.whisper_pass.WhisperPassRunner whose "transcript" is one word per
loud 100 ms of the audio it is given, so tests can tell exactly what a pass heard. Records the
start/end time and length of every pass; can be slowed (`delay_secs`) or held (`gate`)."""

from __future__ import annotations

import threading
import time

import numpy as np

from diffvoice.voice.asr.whisper_pass import PassResult

WORDS = [f"w{i}" for i in range(400)]


class FakeRunner:
    def __init__(self, delay_secs: float = 0.0, gate: threading.Event | None = None) -> None:
        self.delay_secs = delay_secs
        self.gate = gate
        self.entered = threading.Event()
        self.calls: list[dict] = []
        self._lock = threading.Lock()

    def run(self, samples: np.ndarray, prefix: str | None = None) -> PassResult:
        started = time.monotonic()
        self.entered.set()
        if self.gate is not None:
            self.gate.wait(30)
        if self.delay_secs:
            time.sleep(self.delay_secs)
        windows = samples[: len(samples) // 1600 * 1600].reshape(-1, 1600)
        loud = int((np.sqrt((windows**2).mean(axis=1)) > 0.01).sum()) if len(windows) else 0
        text = " ".join(WORDS[:loud])
        with self._lock:
            self.calls.append(
                {
                    "start": started,
                    "end": time.monotonic(),
                    "samples": len(samples),
                    "prefix": prefix,
                }
            )
        return PassResult(text, len(samples), 0.0, 0.0, 1.0, 1.0, 100)
