"""Per-call limits that keep one client from holding the server: per-IP session slots and a
watchdog for idle and over-long calls.

Contract:
- `ClientSlots(limit)`: `acquire(ip) -> bool` (False when `ip` already holds `limit` sessions),
  `release(ip)`; `held()` is the total (a gauge for /metrics). Thread-unsafe by design: used
  from the one server event loop.
- `CallWatchdog(idle_timeout_s, max_call_s, on_expire)`: `heard(audio_s)` with the seconds of
  every caller audio frame; `start()` runs a task that calls `await on_expire(reason)` once,
  with reason "idle_timeout" or "max_duration" (the call is max_call_s old); `stop()` cancels
  it and waits. `expired` says which limit fired (or None). Idleness is measured in audio, not
  in messages (issue 54 N5: an empty frame every 20 s kept a silent call open): the idle clock
  restarts (`touch()`) only once `min_audio_s` seconds of audio (1 s, at most a quarter of
  idle_timeout_s) have come since it last did, so a call is closed "idle_timeout" when less
  than that much audio came in idle_timeout_s, however many empty or tiny frames did.
  `fire(reason)` ends the call now for another reason the transport found (e.g.
  "output_stalled"), through the same `on_expire`.
- `browser_session_limit(config)`: how many /ws browser sessions may run at once (issue 54
  N6): `max_browser_sessions` when set (at most `max_sessions`); else, when Twilio is configured
  (an auth token, or validation off), `max_sessions` less the phone share
  (voice.telephony.admission.phone_call_limit), at least 1, so browser callers cannot take the
  lines kept for phone callers (who are capped at their share the same way); else
  `max_sessions`. None when the config has no `max_sessions` (tests' bare configs).

Knows nothing about sockets or pipecat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable

MIN_AUDIO_S = 1.0  # caller audio that restarts the idle clock (at most idle_timeout_s / 4)


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
        self.min_audio_s = min(MIN_AUDIO_S, self.idle_timeout_s / 4)
        self._heard_s = 0.0  # caller audio since the idle clock last restarted
        self._task: asyncio.Task | None = None
        self._fired: asyncio.Future | None = None

    def touch(self) -> None:
        self.last_activity = self._clock()
        self._heard_s = 0.0

    def heard(self, audio_s: float) -> None:
        """`audio_s` seconds of caller audio arrived (0 for an empty frame: nothing)."""
        self._heard_s += audio_s
        if self._heard_s >= self.min_audio_s:
            self.touch()

    def fire(self, reason: str) -> None:
        """End the call now for `reason`, unless a limit already did."""
        if self.expired is None:
            self.expired = reason
            self._fired = asyncio.ensure_future(self._on_expire(reason))

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
        while self.expired is None:  # fire() may have ended the call already
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
        fired, self._fired = self._fired, None
        if fired is not None and fired is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await fired  # the close fire() started finishes first


def browser_session_limit(config) -> int | None:
    max_sessions = getattr(config, "max_sessions", None)
    explicit = getattr(config, "max_browser_sessions", None)
    if max_sessions is None:
        return explicit
    if explicit is not None:
        return min(int(explicit), int(max_sessions))
    from diffvoice.voice.telephony.admission import phone_call_limit
    from diffvoice.voice.telephony.config import TelephonyConfig

    if not TelephonyConfig.from_serve_config(config).ready:
        return int(max_sessions)  # no phone caller can come: nothing to keep for them
    return max(1, int(max_sessions) - (phone_call_limit(config) or 0))
