"""voice.malloc_tune: trimming gives freed heap pages back (glibc), never raises elsewhere."""

import ctypes

import pytest

from diffvoice.voice import malloc_tune


def _rss_kb() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))


@pytest.mark.skipif(malloc_tune._malloc_trim is None, reason="libc has no malloc_trim")
def test_trim_returns_freed_small_blocks():
    # 60k blocks of 1 KiB (below the mmap threshold): freed, they stay in the heap until trimmed
    blocks = [ctypes.create_string_buffer(1024) for _ in range(60_000)]
    for b in blocks:
        ctypes.memset(b, 1, 1024)
    keep = blocks[-1]  # pins the top of the heap, so free() alone cannot shrink it
    del blocks
    before = _rss_kb()
    assert malloc_tune.trim() in (True, False)
    after = _rss_kb()
    assert before - after > 20_000, (before, after)  # most of the ~60 MB comes back
    del keep


def test_limit_arenas_and_trim_soon_are_safe():
    assert malloc_tune.limit_arenas(4) in (True, False)
    assert malloc_tune.limit_arenas(0) is False
    malloc_tune.trim_soon(min_interval_s=0.0)  # no loop: trims inline
