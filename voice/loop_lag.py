"""`LoopLag`: how late the server's event loop runs its callbacks, for /metrics.

Every call in the process shares one event loop; when it has more work than it can do, every
frame, send and timer of every call waits in line, and audio trickles out late (the 32-caller
soak: answers arriving at a fraction of real time). This is the number that says so before
callers do: a task sleeps `interval_s` again and again and records how much later than asked it
woke up.

Contract: `LoopLag(interval_s=0.05).start()` (on the running loop) -> the monitor;
`take()` -> (worst, mean) lag in seconds since the previous `take()` (0, 0 if no wake-up
completed meanwhile) and starts a new window; `stop()` cancels the task. Costs one wake-up per
interval. Knows nothing about metrics formats or sessions.
"""

from __future__ import annotations

import asyncio
import time


class LoopLag:
    def __init__(self, interval_s: float = 0.05) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.interval_s = interval_s
        self._task: asyncio.Task | None = None
        self._worst = 0.0
        self._total = 0.0
        self._count = 0

    def start(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loop-lag")
        return self

    async def _run(self) -> None:
        while True:
            asked = time.monotonic() + self.interval_s
            await asyncio.sleep(self.interval_s)
            lag = max(0.0, time.monotonic() - asked)
            self._worst = max(self._worst, lag)
            self._total += lag
            self._count += 1

    def take(self) -> tuple[float, float]:
        worst, mean = self._worst, (self._total / self._count if self._count else 0.0)
        self._worst = self._total = 0.0
        self._count = 0
        return worst, mean

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None
