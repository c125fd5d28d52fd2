"""DecoderPool stays bounded: at most `max_total` decoders in use (then acquire waits, and
times out with a clear error), at most `max_idle` kept after a burst (issue 12: it only grew)."""

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


def test_burst_then_shrink(fake_decoders):
    pool = DecoderPool(size=1, max_idle=2, max_total=5, acquire_timeout_secs=0.2)
    held = [pool.acquire() for _ in range(5)]
    assert pool.total == 5 and pool.created == 5 and pool.idle == 0
    with pytest.raises(TimeoutError, match="all 5 pocketsphinx decoders busy"):
        pool.acquire()
    for decoder in held:
        pool.release(decoder)
    assert pool.idle == 2 and pool.total == 2 and pool.discarded == 3  # shrank back


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
    pool = DecoderPool(size=1, max_idle=3, max_total=4, acquire_timeout_secs=10)
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
