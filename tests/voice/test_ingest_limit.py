"""voice.ingest_limit: the token bucket in audio seconds, on a fake clock."""

from __future__ import annotations

import pytest

from diffvoice.voice.ingest_limit import (
    ACCEPT,
    CLOSE,
    DROP,
    IngestLimit,
    mulaw_seconds,
    pcm_seconds,
)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_seconds_from_sample_counts():
    assert pcm_seconds(65536, 16000) == 2.048
    assert mulaw_seconds(8000) == 1.0 and mulaw_seconds(160) == 0.02


def test_real_time_and_up_to_the_rate_is_always_accepted():
    for speed in (1.0, 1.5):
        clock = Clock()
        limit = IngestLimit(clock=clock)
        for _ in range(30_000):  # 10 min of 20 ms frames
            assert limit.admit(0.02) == ACCEPT
            clock.t += 0.02 / speed


def test_a_flood_is_closed_after_a_bounded_amount_of_audio():
    clock = Clock()
    limit = IngestLimit(clock=clock)
    verdicts = [limit.admit(2.048) for _ in range(5)]  # 64 KiB frames, no time passing
    assert verdicts == [ACCEPT, CLOSE, CLOSE, CLOSE, CLOSE]
    clock = Clock()
    limit = IngestLimit(clock=clock)
    verdicts = [limit.admit(0.02) for _ in range(400)]
    assert verdicts[:100] == [ACCEPT] * 100  # the 2 s burst
    closed_at = verdicts.index(CLOSE)  # then refused until 2 s of excess: closed
    assert set(verdicts[100:closed_at]) == {DROP} and 99 <= closed_at - 100 <= 101
    assert set(verdicts[closed_at:]) == {CLOSE}


def test_twice_real_time_is_refused_in_part_then_closed():
    clock = Clock()
    limit = IngestLimit(clock=clock)
    verdicts = []
    for _ in range(2000):  # 20 s of wall time at 2x
        verdicts.append(limit.admit(0.02))
        clock.t += 0.01
    closed_at = verdicts.index(CLOSE)
    accepted = verdicts[:closed_at].count(ACCEPT) * 0.02
    assert accepted <= 2.0 + 1.5 * closed_at * 0.01 + 0.02  # burst + rate x elapsed
    assert 5.0 < closed_at * 0.01 < 10.0  # the excess grows 0.5 s a second past the burst


def test_a_late_burst_loses_its_excess_but_the_call_goes_on():
    clock = Clock()
    limit = IngestLimit(clock=clock)
    for _ in range(500):  # 10 s in real time
        assert limit.admit(0.02) == ACCEPT
        clock.t += 0.02
    burst = [limit.admit(0.02) for _ in range(150)]  # a 3 s network stall, delivered at once
    assert burst.count(DROP) == 50 and CLOSE not in burst
    for _ in range(1000):  # real time again: accepted, and the excess is forgotten
        clock.t += 0.02
        assert limit.admit(0.02) == ACCEPT
    assert limit.excess_s == 0.0


def test_rate_zero_is_off_and_bad_values_are_refused():
    limit = IngestLimit(rate=0)
    assert all(limit.admit(10.0) == ACCEPT for _ in range(100))
    for bad in ({"rate": 0.5}, {"rate": -1}, {"burst_s": 0}, {"rate": True}):
        with pytest.raises(ValueError):
            IngestLimit(**bad)
