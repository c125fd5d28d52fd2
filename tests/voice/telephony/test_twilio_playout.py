"""PlayoutTracker: joining mark echoes to latency records, in either order."""

from __future__ import annotations

import random

import pytest

from diffvoice.voice.telephony.playout import PlayoutTracker


def record(turn: int, vad_stop_t: float, sent_t: float) -> dict:
    return {"turn": turn, "vad_stop_t": vad_stop_t, "first_audio_sent_t": sent_t}


def test_echo_before_record():
    out = []
    t = PlayoutTracker(out.append)
    mark = t.speech_started(10.4)
    t.mark_echoed(mark, 10.6)
    assert out == []
    t.on_latency(record(1, 10.0, 10.4), 10.7)
    assert out[0]["first_audio_heard_t"] == 10.6
    assert out[0]["playout_ms"] == pytest.approx(200.0)
    assert out[0]["heard_ms"] == pytest.approx(600.0)
    assert out[0]["playout"] == "heard"


def test_record_before_echo_and_extra_fields():
    out = []
    t = PlayoutTracker(out.append, extra_fields={"call_sid": "CA1"})
    t.on_latency(record(1, 5.0, 5.3), 5.31)
    mark = t.speech_started(5.3)
    assert out == []
    t.mark_echoed(mark, 5.5)
    assert out[0]["call_sid"] == "CA1" and out[0]["first_audio_heard_t"] == 5.5


def test_clear_makes_pending_echo_not_heard():
    out = []
    t = PlayoutTracker(out.append)
    t.on_latency(record(1, 1.0, 1.2), 1.2)
    first = t.speech_started(1.2)
    t.interrupted(1.25)  # clear sent before Twilio played the first chunk
    t.mark_echoed(first, 1.26)  # Twilio flushes marks on clear
    assert len(out) == 1
    assert out[0]["playout"] == "cleared" and out[0]["first_audio_heard_t"] is None


def test_no_echo_times_out_and_close_flushes():
    out = []
    t = PlayoutTracker(out.append, wait_for_echo_s=2.0)
    t.speech_started(1.1)
    t.on_latency(record(1, 1.0, 1.1), 1.1)
    t.expire(2.0)
    assert out == []
    t.expire(3.2)
    assert out[0]["playout"] == "no_echo"
    t.on_latency(record(2, 4.0, 4.1), 4.1)  # answer audio never started
    t.close(4.2)
    assert out[1]["playout"] == "no_audio" and out[1]["first_audio_heard_t"] is None


def test_each_turn_matches_its_own_run_on_random_timelines():
    rng = random.Random(7)
    out = []
    t = PlayoutTracker(out.append, wait_for_echo_s=100.0)
    truth = {}
    now = 0.0
    for turn in range(1, 30):
        now += rng.uniform(1.0, 3.0)
        vad_stop = now
        sent = vad_stop + rng.uniform(0.1, 0.8)
        heard = sent + rng.uniform(0.05, 0.4)
        truth[turn] = heard
        record_first = rng.random() < 0.5
        if record_first:
            t.on_latency(record(turn, vad_stop, sent), sent)
        mark = t.speech_started(sent)
        t.mark_echoed(mark, heard)
        if not record_first:
            t.on_latency(record(turn, vad_stop, sent), heard + 0.01)
        t.mark_echoed(t.speech_stopped(heard + 1.0), heard + 1.1)
        now = heard + 1.1
    assert {r["turn"]: r["first_audio_heard_t"] for r in out} == truth
