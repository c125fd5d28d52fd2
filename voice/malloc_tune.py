"""Give freed native memory back to the OS (glibc), so RSS follows the live sessions.

A voice server frees many mid-sized native buffers per call (audio frames, ONNX / pocketsphinx /
espeak work buffers) from several threads. glibc keeps freed memory in per-thread arenas and
returns it to the OS only when the top of a heap is free, so RSS ratchets up with each burst of
calls even though nothing leaks. Two standard knobs fix that:

- `limit_arenas(n)`: mallopt(M_ARENA_MAX, n) (what MALLOC_ARENA_MAX=n does, for arenas created
  from now on; call once at start-up);
- `trim()`: malloc_trim(0), returning free pages of every arena; cheap (milliseconds) and run off
  the event loop by `trim_soon()` at most once per `min_interval_s`, when a session ends.

On a libc without these functions (musl, macOS) both are no-ops. Knows nothing about sessions.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import time

log = logging.getLogger(__name__)
M_ARENA_MAX = -8

try:
    _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    _mallopt = getattr(_libc, "mallopt", None)
    _malloc_trim = getattr(_libc, "malloc_trim", None)
except OSError:  # pragma: no cover - no C library to load
    _mallopt = _malloc_trim = None

_last_trim = 0.0


def limit_arenas(n: int) -> bool:
    if _mallopt is None or n < 1:
        return False
    return bool(_mallopt(M_ARENA_MAX, int(n)))


def trim() -> bool:
    return bool(_malloc_trim(0)) if _malloc_trim is not None else False


def trim_soon(min_interval_s: float = 2.0) -> None:
    """Schedule one trim in a worker thread unless one ran in the last `min_interval_s`."""
    global _last_trim
    now = time.monotonic()
    if _malloc_trim is None or now - _last_trim < min_interval_s:
        return
    _last_trim = now
    try:
        asyncio.get_running_loop().run_in_executor(None, trim)
    except RuntimeError:  # no running loop
        trim()
