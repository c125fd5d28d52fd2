"""Per-call limits that keep one client from holding the server: per-IP session slots and a
watchdog for idle and over-long calls.

Contract:
- `ClientSlots(limit)`: `acquire(ip) -> bool` (False when `ip` already holds `limit` sessions),
  `release(ip)`; `held()` is the total (a gauge for /metrics). Thread-unsafe by design: used
  from the one server event loop.
- `CallWatchdog(idle_timeout_s, max_call_s, on_expire)`: `touch()` whenever caller audio
  arrives; `start()` runs a task that calls `await on_expire(reason)` once, with reason
  "idle_timeout" (no `touch()` for idle_timeout_s) or "max_duration" (the call is max_call_s
  old); `stop()` cancels it and waits. `expired` says which limit fired (or None).

Knows nothing about sockets or pipecat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable


class ClientSlots:
    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit!r}")
        self.limit = limit
        self._by_ip: dict[str, int] = {}

    def acquire(self, ip: str) -> bool:
        held = self._by_ip.get(ip, 0)
        if held >= self.limit:
            return False
        self._by_ip[ip] = held + 1
        return True

    def release(self, ip: str) -> None:
        held = self._by_ip.get(ip, 0) - 1
        if held > 0:
            self._by_ip[ip] = held
        else:
            self._by_ip.pop(ip, None)

    def held(self) -> int:
        return sum(self._by_ip.values())


class CallWatchdog:
    def __init__(self, idle_timeout_s: float, max_call_s: float,
                 on_expire: Callable[[str], Awaitable[None]], clock=time.monotonic) -> None:
        self.idle_timeout_s = float(idle_timeout_s)
        self.max_call_s = float(max_call_s)
        self._on_expire = on_expire
        self._clock = clock
        self.started_at = clock()
        self.last_activity = self.started_at
        self.expired: str | None = None
        self._task: asyncio.Task | None = None

    def touch(self) -> None:
        self.last_activity = self._clock()

    def due(self) -> tuple[str | None, float]:
        """(reason, 0) if a limit is reached, else (None, seconds until the next check)."""
        now = self._clock()
        idle_left = self.last_activity + self.idle_timeout_s - now
        call_left = self.started_at + self.max_call_s - now
        if call_left <= 0:
            return "max_duration", 0.0
        if idle_left <= 0:
            return "idle_timeout", 0.0
        return None, min(idle_left, call_left)

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._watch(), name="call-watchdog")

    async def _watch(self) -> None:
        while True:
            reason, wait_s = self.due()
            if reason is not None:
                self.expired = reason
                await self._on_expire(reason)
                return
            await asyncio.sleep(min(wait_s, 1.0) + 0.01)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
