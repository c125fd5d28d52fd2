"""`PassBudget`: the process-wide cap on concurrent recognition passes (one per loaded model,
shared by every call), so that under load fewer interim passes run instead of all of them
running slower.

    budget = PassBudget(slots=2)
    result = budget.run(fn, wait=False)   # in a worker thread: None when no slot is free (skip)
    result = budget.run(fn, wait=True, abandoned=event)  # final pass: waits for a slot, but
                                                         # returns None once `abandoned` is set

    budget.join(); budget.calls; budget.leave()   # calls streaming into this model now

Slots are taken and released inside the worker thread that does the work, so a caller that
stops waiting (cancelled asyncio task) cannot leak a slot: the slot is held exactly as long as
the CPU is busy. Counts `ran`, `skipped` and the peak of concurrent passes for tests and logs.
Knows nothing about asyncio or models.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class PassBudget:
    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots}")
        self.slots = slots
        self._semaphore = threading.BoundedSemaphore(slots)
        self._lock = threading.Lock()
        self.running = 0
        self.peak = 0
        self.ran = 0
        self.skipped = 0
        self.calls = 0  # calls (recognisers) using this model now: join() / leave()

    def join(self) -> None:
        with self._lock:
            self.calls += 1

    def leave(self) -> None:
        with self._lock:
            self.calls = max(0, self.calls - 1)

    def run(
        self,
        fn: Callable[[], T],
        *,
        wait: bool,
        abandoned: threading.Event | None = None,
        poll_secs: float = 0.05,
    ) -> T | None:
        if wait:
            while not self._semaphore.acquire(timeout=poll_secs):
                if abandoned is not None and abandoned.is_set():
                    return None
        elif not self._semaphore.acquire(blocking=False):
            with self._lock:
                self.skipped += 1
            return None
        try:
            if abandoned is not None and abandoned.is_set():
                return None
            with self._lock:
                self.running += 1
                self.peak = max(self.peak, self.running)
            try:
                return fn()
            finally:
                with self._lock:
                    self.running -= 1
                    self.ran += 1
        finally:
            self._semaphore.release()
