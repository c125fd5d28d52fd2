"""Event-loop stall reporter (diagnostics): what held the server's event loop.

Contract: `LoopWatchdog(loop, threshold_s).start()` schedules a heartbeat on `loop` every 10 ms
and runs a daemon thread that samples the loop thread's Python stack (sys._current_frames)
while a heartbeat is more than `threshold_s` late. When the loop catches up, one WARNING line
is logged: the stall's length and its most frequent stack (innermost frames last), so a
callback that blocks every other call can be found in a live server (`--loop-stall-log-ms`).
`stalls` counts them and `longest_s` keeps the worst; `stop()` ends the thread. The sampler
needs the GIL, so a stall caused by a C call that holds it shows as one sample of that call.
"""

from __future__ import annotations

import asyncio
import sys
import threading
import time
import traceback
from collections import Counter

from loguru import logger

HEARTBEAT_S = 0.01


class LoopWatchdog:
    def __init__(self, loop: asyncio.AbstractEventLoop, threshold_s: float) -> None:
        if threshold_s <= 0:
            raise ValueError(f"threshold_s must be > 0, got {threshold_s!r}")
        self.loop = loop
        self.threshold_s = threshold_s
        self.stalls = 0
        self.longest_s = 0.0
        self._last_beat = time.monotonic()
        self._loop_thread = threading.get_ident()  # start() runs on the loop's thread
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="loop-watchdog", daemon=True)

    def start(self) -> LoopWatchdog:
        self._loop_thread = threading.get_ident()
        self.loop.call_soon(self._beat)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _beat(self) -> None:
        self._last_beat = time.monotonic()
        if not self._stop.is_set():
            self.loop.call_later(HEARTBEAT_S, self._beat)

    def _stack(self) -> str | None:
        frame = sys._current_frames().get(self._loop_thread)
        if frame is None:
            return None
        lines = traceback.format_stack(frame, limit=12)
        return "".join(line.split("\n")[0].strip() + "\n" for line in lines).strip()

    def _watch(self) -> None:
        stacks: Counter = Counter()
        stall_start = None
        while not self._stop.wait(HEARTBEAT_S / 2):
            late = time.monotonic() - self._last_beat - HEARTBEAT_S
            if late > self.threshold_s:
                if stall_start is None:
                    stall_start = self._last_beat + HEARTBEAT_S
                stack = self._stack()
                if stack:
                    stacks[stack] += 1
            elif stall_start is not None:
                length = self._last_beat - stall_start
                self.stalls += 1
                self.longest_s = max(self.longest_s, length)
                top = stacks.most_common(1)[0] if stacks else ("?", 0)
                logger.warning(f"event loop stalled {length * 1000:.0f} ms "
                               f"({sum(stacks.values())} samples; {top[1]} at):\n{top[0]}")
                stacks.clear()
                stall_start = None
