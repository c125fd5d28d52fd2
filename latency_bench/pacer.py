"""Real-time pacing of caller audio: one fixed-size frame per frame period, like a microphone.

Contract: `Pacer(send, frame_s)` sends frame k of a session at `t0 + (k + 1) * frame_s` on the
event loop's monotonic clock (a mic delivers a frame once its last sample was captured), where
t0 is the first call. `await pacer.send(payload)` returns the epoch time (`time.time()`) right
after the frame was handed to the socket. If the loop falls behind (a loaded 2-core machine),
frames go out late and then catch up, as a real audio buffer would; the worst lateness is kept
in `max_lag_s` (and per turn via `take_lag_s()`) so reports show when the client, not the
server, was the bottleneck. Knows nothing about audio formats or protocols.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any


class Pacer:
    def __init__(self, send: Callable[[Any], Awaitable[None]], frame_s: float = 0.02) -> None:
        if frame_s <= 0:
            raise ValueError(f"frame_s must be > 0, got {frame_s}")
        self._send = send
        self.frame_s = frame_s
        self._t0: float | None = None
        self.frames_sent = 0
        self.max_lag_s = 0.0
        self._turn_lag_s = 0.0

    async def send(self, payload: Any) -> float:
        loop = asyncio.get_running_loop()
        if self._t0 is None:
            self._t0 = loop.time()
        target = self._t0 + (self.frames_sent + 1) * self.frame_s
        delay = target - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        lag = loop.time() - target
        if lag > self._turn_lag_s:
            self._turn_lag_s = lag
            self.max_lag_s = max(self.max_lag_s, lag)
        await self._send(payload)
        self.frames_sent += 1
        return time.time()

    def take_lag_s(self) -> float:
        """Worst lateness since the last call (then reset): one turn's pacing quality."""
        lag, self._turn_lag_s = self._turn_lag_s, 0.0
        return lag
