"""`LagWatch`: logs (INFO, at most once per `every_secs`) when one call's caller audio reaches a
stage of its pipeline late, so a caller who got no answer can be traced to where the audio
waited (issue 12: in 32-caller soaks a few calls' audio reached the VAD 3-6 s late while the
event loop as a whole lagged < 0.6 s).

Contract: `watch.frame(frame)` with an InputAudioRawFrame stamped by voice.transport.vad_aligned
(`received_t`, the wall time its audio arrived from the wire): logs when it is older than
`limit_secs`. `watch.stream(samples, rate)` for a stage that sees only audio (the VAD): the
audio is expected to come in real time, so how far the stream position has fallen behind the
wall clock since the best moment seen so far is the stage's lag. Cheap: a subtraction per frame.
"""

from __future__ import annotations

import time

from loguru import logger


class LagWatch:
    def __init__(self, stage: str, owner: object, limit_secs: float = 1.0,
                 every_secs: float = 5.0) -> None:
        self.stage = stage
        self.owner = owner
        self.limit_secs = limit_secs
        self.every_secs = every_secs
        self.worst = 0.0  # the largest lag seen (seconds)
        self._logged = -float("inf")
        self._origin: float | None = None  # min over time of (wall clock - stream position)

    def frame(self, frame) -> None:
        received = getattr(frame, "received_t", None)
        if received is not None:
            self._check(time.time() - received)

    def stream(self, samples: int, rate: int) -> None:
        offset = time.time() - samples / rate
        if self._origin is None or offset < self._origin:
            self._origin = offset
        self._check(offset - self._origin)

    def _check(self, lag: float) -> None:
        self.worst = max(self.worst, lag)
        if lag > self.limit_secs:
            now = time.monotonic()
            if now - self._logged >= self.every_secs:
                self._logged = now
                logger.info(f"{self.owner}: caller audio reaches the {self.stage} {lag:.2f} s "
                            f"late")
