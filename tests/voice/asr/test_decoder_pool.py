"""DecoderPool stays bounded: at most `max_total` decoders in use (then acquire waits, and
times out with a clear error); a burst's decoders serve the next burst (a build freezes the
event loop) and only `max_idle` stay once the rest were idle `idle_secs` (issue 12: it only
grew)."""

from __future__ import annotations

import random
import threading

import pytest

from diffvoice.voice.asr.pocketsphinx_stt import DecoderPool


class _FakeDecoder:
    pass


@pytest.fixture
def fake_decoders(monkeypatch):
    monkeypatch.setattr(DecoderPool, "_new", lambda self: _FakeDecoder())


class _Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_burst_decoders_serve_the_next_burst_then_age_out(fake_decoders):
    clock = _Clock()
    pool = DecoderPool(size=1, max_idle=2, max_total=5, acquire_timeout_secs=0.2,
                       idle_secs=60.0, clock=clock)
    held = [pool.acquire() for _ in range(5)]
    assert pool.total == 5 and pool.created == 5 and pool.idle == 0
    with pytest.raises(TimeoutError, match="all 5 pocketsphinx decoders busy"):
        pool.acquire()
    for decoder in held:
        pool.release(decoder)
    assert pool.idle == 5 and pool.discarded == 0  # kept for the next burst
    clock.t += 30
    again = [pool.acquire() for _ in range(4)]  # a second burst 30 s later: nothing rebuilt
    assert pool.created == 5 and set(map(id, again)) <= set(map(id, held))
    for decoder in again:
        pool.release(decoder)
    clock.t += 59  # the one decoder left out of the second burst has been idle 89 s
    pool.release(pool.acquire())
    assert pool.idle == 4 and pool.discarded == 1
    clock.t += 61  # a quiet spell: everything beyond max_idle ages out
    pool.release(pool.acquire())
    assert pool.idle == 2 and pool.total == 2 and pool.discarded == 3 and pool.created == 5


def test_a_waiting_acquire_gets_the_next_released_decoder(fake_decoders):
    pool = DecoderPool(size=0, max_idle=1, max_total=1, acquire_timeout_secs=5)
    first = pool.acquire()
    got = []
    waiter = threading.Thread(target=lambda: got.append(pool.acquire()))
    waiter.start()
    waiter.join(0.2)
    assert waiter.is_alive()  # blocked: the only decoder is in use
    pool.release(first)
    waiter.join(5)
    assert got == [first] and pool.created == 1


def test_concurrent_use_never_exceeds_the_bounds(fake_decoders):
    pool = DecoderPool(size=1, max_idle=3, max_total=4, acquire_timeout_secs=10, idle_secs=0)
    in_use = []
    peak = [0]
    lock = threading.Lock()

    def caller(seed: int) -> None:
        rng = random.Random(seed)
        for _ in range(50):
            decoder = pool.acquire()
            with lock:
                in_use.append(decoder)
                peak[0] = max(peak[0], len(in_use))
                assert pool.total <= 4 and pool.idle <= 3
            if rng.random() < 0.5:
                threading.Event().wait(0.001)
            with lock:
                in_use.remove(decoder)
            pool.release(decoder)

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert peak[0] <= 4 and pool.total <= 3 and pool.idle == pool.total


def test_bad_bounds_are_refused():
    with pytest.raises(ValueError, match="max_idle"):
        DecoderPool(size=0, max_idle=5, max_total=2)
    with pytest.raises(ValueError, match="size"):
        DecoderPool(size=3, max_idle=2, max_total=4)


def test_prewarm_builds_up_to_max_idle_and_the_first_calls_build_nothing(fake_decoders):
    pool = DecoderPool(size=1, max_idle=3, max_total=5)
    assert pool.prewarm() == 2 and pool.idle == 3 and pool.total == 3 == pool.created
    assert pool.prewarm() == 0  # already warm
    held = [pool.acquire() for _ in range(3)]
    assert pool.created == 3  # three calls at once: no build while they wait
    assert pool.prewarm(10) == 2 and pool.idle == 2 and pool.total == 5  # capped by max_total
    assert pool.prewarm() == 0
    for decoder in held:
        pool.release(decoder)
    assert pool.total == 5


async def test_a_segment_waits_for_a_busy_decoder_rather_than_build_one(fake_decoders):
    """wait_for_idle: a decoder given back within build_wait_secs is reused (nothing built, a
    build would freeze every call); none within it -> None (the caller then builds)."""
    import asyncio

    from diffvoice.voice.asr.pocketsphinx_stt import wait_for_idle

    pool = DecoderPool(size=1, max_idle=2, max_total=4, build_wait_secs=2.0)
    busy = pool.acquire()
    loop = asyncio.get_running_loop()
    loop.call_later(0.2, pool.release, busy)
    started = loop.time()
    got = await wait_for_idle(pool)
    assert got is busy and pool.created == 1 and pool.waited == 1
    assert 0.15 <= loop.time() - started < 1.5
    short = DecoderPool(size=0, max_idle=1, max_total=2, build_wait_secs=0.1)
    started = loop.time()
    assert await wait_for_idle(short) is None and short.waited == 0
    assert loop.time() - started >= 0.1 and short.created == 0
    pool.release(got)
    started = loop.time()
    assert await wait_for_idle(pool) is busy and loop.time() - started < 0.1  # idle: no wait
    assert pool.waited == 1
    with pytest.raises(ValueError, match="build_wait_secs"):
        DecoderPool(size=0, build_wait_secs=-1)
