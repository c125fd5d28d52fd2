"""latency_bench.playout: when a client hears audio that arrives in bursts or after silence."""

import numpy as np
import pytest

from diffvoice.latency_bench.playout import Playout

RATE = 8000


def _frames(signal, size):
    return [signal[i:i + size] for i in range(0, len(signal), size)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_burst_arrival_is_heard_at_playout_time(seed):
    rng = np.random.default_rng(seed)
    silence_s, tone_s = rng.uniform(0.05, 0.6), rng.uniform(0.3, 1.0)
    tone = (8000 * np.sin(2 * np.pi * 300 * np.arange(int(tone_s * RATE)) / RATE))
    signal = np.concatenate([np.zeros(int(silence_s * RATE)), tone,
                             np.zeros(int(0.2 * RATE))]).astype(np.int16)
    playout = Playout(RATE)
    t0 = 1000.0
    speedup = rng.uniform(1.5, 4.0)          # server sends faster than real time
    frame = int(rng.choice([160, 320, 441]))
    for i, chunk in enumerate(_frames(signal, frame)):
        playout.push(chunk, t0 + i * frame / RATE / speedup)
    assert playout.first_frame_t == t0
    assert playout.first_audible_t == pytest.approx(t0 + silence_s, abs=0.011)
    assert playout.last_audible_end_t == pytest.approx(t0 + silence_s + tone_s, abs=0.011)
    assert playout.queue_end_t == pytest.approx(t0 + len(signal) / RATE, abs=1e-9)


def test_late_frames_leave_gaps_and_flush_drops_the_queue():
    playout = Playout(RATE)
    loud = np.full(160, 5000, np.int16)
    playout.push(loud, 10.0)
    playout.push(loud, 10.5)                  # arrives after the first finished: plays on arrival
    assert playout.queue_end_t == pytest.approx(10.52)
    for _ in range(50):                       # 1 s of audio delivered at once
        playout.push(loud, 11.0)
    assert playout.playing_until(11.0) == pytest.approx(12.0)
    playout.flush(11.25)
    assert playout.queue_end_t == 11.25 and playout.last_audible_end_t == 11.25
    playout.start_turn()
    assert playout.first_audible_t is None and playout.queue_end_t == 11.25


def test_silence_is_never_audible():
    playout = Playout(RATE)
    playout.push(np.zeros(800, np.int16), 5.0)
    playout.push((np.random.default_rng(0).normal(0, 20, 800)).astype(np.int16), 5.1)
    assert playout.first_frame_t == 5.0 and playout.first_audible_t is None
