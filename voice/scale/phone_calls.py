"""Twilio stream admission across `serve --workers N`: one stream per call and the phone-call cap
held for the whole server, in shared memory.

Contract:
- `SharedPhoneCalls(workers, ctx=None)`: built by the supervisor (voice.scale.workers makes one
  inside its SharedAdmission) and handed to every spawned worker. `for_worker(k, limit,
  retention_s)` -> `WorkerPhoneCalls`, the interface of voice.telephony.admission.PhoneAdmission:
  `claim(call_sid, now=None) -> bool` (the first stream of a CallSid on any worker wins; the
  claim is remembered for `retention_s`), `acquire() -> bool` / `release()` / `open_calls()`
  (running phone calls of every worker; at most `limit`, None: no cap) and `limit`.
  `reset(k)` forgets worker k's running calls (it died), never its claims.
- The claim table holds `CLAIMS` CallSids (64-bit hashes); when every entry is still live the
  one that expires first is overwritten (only a CallSid claimed longer ago than every other can
  then be claimed again, and only with a fresh stream token from a signed webhook).

Every operation takes one lock; a claim scans the table (a few ms at most, once per stream).
Knows nothing about sockets or Twilio.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import time

CLAIMS = 4096  # CallSids remembered by the whole server


def _sid_key(call_sid: str) -> int:
    key = int.from_bytes(
        hashlib.blake2b(call_sid.encode("utf-8", "replace"), digest_size=8).digest(),
        "little",
        signed=True,
    )
    return key or 1  # 0 marks an empty entry


class SharedPhoneCalls:
    def __init__(self, workers: int, ctx=None) -> None:
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        ctx = ctx or mp.get_context("spawn")
        self.workers = workers
        self._lock = ctx.Lock()
        self._open = ctx.RawArray("i", workers)  # running phone calls of each worker
        self._keys = ctx.RawArray("q", CLAIMS)
        self._until = ctx.RawArray("d", CLAIMS)  # when each claim may be forgotten (Unix time)

    def for_worker(self, k: int, limit: int | None, retention_s: float) -> WorkerPhoneCalls:
        if not 0 <= k < self.workers:
            raise ValueError(f"worker {k} not in 0..{self.workers - 1}")
        return WorkerPhoneCalls(self, k, limit, retention_s)

    def reset(self, k: int) -> None:
        with self._lock:
            self._open[k] = 0


class WorkerPhoneCalls:
    def __init__(
        self,
        shared: SharedPhoneCalls,
        k: int,
        limit: int | None,
        retention_s: float,
        clock=time.time,
    ) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"limit must be >= 1 or None, got {limit!r}")
        self._shared, self.worker = shared, k
        self.limit = limit
        self.retention_s = float(retention_s)
        self._clock = clock

    def claim(self, call_sid: str, now: float | None = None) -> bool:
        s, key = self._shared, _sid_key(call_sid)
        now = self._clock() if now is None else now
        with s._lock:
            free = oldest = None
            for i in range(CLAIMS):
                live = s._keys[i] != 0 and s._until[i] > now
                if live and s._keys[i] == key:
                    return False
                if not live and free is None:
                    free = i
                elif live and (oldest is None or s._until[i] < s._until[oldest]):
                    oldest = i
            i = free if free is not None else oldest
            s._keys[i], s._until[i] = key, now + self.retention_s
            return True

    def acquire(self) -> bool:
        s = self._shared
        with s._lock:
            if self.limit is not None and sum(s._open) >= self.limit:
                return False
            s._open[self.worker] += 1
            return True

    def release(self) -> None:
        s = self._shared
        with s._lock:
            s._open[self.worker] = max(0, s._open[self.worker] - 1)

    def open_calls(self) -> int:
        with self._shared._lock:
            return sum(self._shared._open)
