"""latency_bench.turn_taking and its Markdown (turn_table) on synthetic turns: cut-offs land at
the prompt's longest pause, slot answers and hold-out voices are summarised apart, and the 2 %
point is the fastest stop_secs that cuts callers off at most 2 % of the time, per sweep."""

from __future__ import annotations

import pytest

from diffvoice.latency_bench.load import turn_stats
from diffvoice.latency_bench.markdown import render_markdown
from diffvoice.latency_bench.report import SweepPoint, build_report
from diffvoice.latency_bench.turn_table import cutoff_lines, turn_taking_lines
from diffvoice.latency_bench.turn_taking import (
    by_split,
    cutoff_points,
    paused_premature,
    premature_by_pause,
    voice_to_voice_by_kind,
)
from diffvoice.latency_bench.turns import TurnResult


def _turn(kind="question", pauses=(), cut=False, v2v_ms=500.0, voice="en-us",
          status="ok"):
    turn = TurnResult(concurrency=1, session=0, turn=1, prompt="x", voice=voice, kind=kind,
                      pauses_ms=pauses, speech_end_t=10.0,
                      first_audible_t=10.0 + v2v_ms / 1000)
    if cut:
        turn.premature_eot = True
        turn.fail("error", "premature end of turn")
    elif status == "timeout":
        turn.fail("timeout", "no answer")
    return turn


def test_a_paused_turn_counts_at_its_longest_pause():
    turns = [_turn("paused", (300,)), _turn("paused", (300,), cut=True),
             _turn("paused", (300, 800), cut=True),         # longest pause: 800
             _turn("paused", (450, 450), status="timeout"),  # attempted, not cut
             _turn(), _turn(cut=True)]                       # no pauses: not counted here
    assert premature_by_pause(turns) == {
        "300": {"turns": 2, "premature": 1, "rate": 0.5},
        "450": {"turns": 1, "premature": 0, "rate": 0.0},
        "800": {"turns": 1, "premature": 1, "rate": 1.0},
    }
    assert list(premature_by_pause(turns)) == ["300", "450", "800"]   # ascending ms
    assert paused_premature(turns) == (2, 4)


def test_slot_answers_and_hold_out_voices_are_summarised_apart():
    turns = ([_turn("slot", v2v_ms=ms) for ms in (300, 400, 500)]
             + [_turn("question", v2v_ms=900, voice="jm_kumo"),
                _turn("question", cut=True, voice="jm_kumo"),
                _turn("paused", (600,), v2v_ms=1000)])
    kinds = voice_to_voice_by_kind(turns)
    assert set(kinds) == {"paused", "question", "slot"}
    assert kinds["slot"]["count"] == 3 and kinds["slot"]["p50"] == pytest.approx(400)
    assert kinds["question"]["count"] == 1       # the cut-off turn gives no latency
    split = by_split(turns, ("jm_kumo", "jf_gongitsune"))
    assert split["holdout"]["voices"] == ["jm_kumo"]
    assert (split["holdout"]["turns"], split["holdout"]["premature"]) == (2, 1)
    assert split["holdout"]["premature_eot_rate"] == 0.5
    assert split["development"]["turns"] == 4 and split["development"]["premature"] == 0
    assert by_split(turns[:3], ("jm_kumo",)).keys() == {"development"}


def test_slot_answers_after_the_agents_question_are_summarised_apart():
    def said(session, turn, kind, bot_text, v2v_ms=400.0):
        t = _turn(kind, v2v_ms=v2v_ms)
        t.session, t.turn, t.bot_text = session, turn, bot_text
        return t
    turns = [said(0, 1, "question", "What day would you like?"),
             said(0, 2, "slot", "Friday at 10 am is free.", v2v_ms=350),
             said(1, 1, "question", "We're open from 8 am to 5 pm."),
             said(1, 2, "slot", "Sorry?", v2v_ms=1100),     # no question was asked before it
             said(2, 2, "slot", "", v2v_ms=1200)]           # its previous turn was not heard
    kinds = voice_to_voice_by_kind(turns)
    assert kinds["slot"]["count"] == 3
    assert kinds["slot_after_question"]["count"] == 1
    assert kinds["slot_after_question"]["p50"] == pytest.approx(350)
    assert "slot_after_question" not in voice_to_voice_by_kind(turns[2:])


def _point(level, rate, endpointing_ms, v2v_ms, paused_turns=60, turns=100):
    def summary(value):
        if value is None:
            return {"count": 0, "mean": None, "p50": None, "p90": None, "p95": None,
                    "p99": None, "max": None}
        return {"count": 10, "mean": value, "p50": value, "p90": value, "p95": value,
                "p99": value, "max": value}
    return {"concurrency": level, "turns": turns,
            "stages": {"endpointing_ms": summary(endpointing_ms),
                       "voice_to_voice_ms": summary(v2v_ms)},
            "turn_stats": {"paused_turns": paused_turns, "paused_premature_rate": rate,
                           "premature_eot_rate": rate / 3 if rate is not None else None}}


def _sweep(smart_turn, rates, level=1):
    """One variant per stop_secs 0.2/0.4/0.6 with the given cut-off rates; slower with more
    silence."""
    return [{"asr": "whisper", "smart_turn": smart_turn, "drafting": "on", "stop_secs": stop,
             "sweep": [_point(level, rate, 1000 * stop + 100, 1000 * stop + 600)]}
            for stop, rate in zip((0.2, 0.4, 0.6), rates, strict=True)]


def test_the_2_percent_point_is_the_fastest_stop_secs_at_or_under_2_percent():
    variants = _sweep("off", (0.10, 0.015, 0.0)) + _sweep("on", (0.05, 0.04, 0.03))
    off, on = cutoff_points(variants)
    assert off["group"] == {"asr": "whisper", "smart_turn": "off", "drafting": "on"}
    assert off["reached"] and off["stop_secs"] == 0.4 and off["basis"] == "paused turns"
    assert off["endpointing_p50_ms"] == pytest.approx(500)
    assert off["voice_to_voice_p50_ms"] == pytest.approx(1000)
    assert [p["stop_secs"] for p in off["points"]] == [0.2, 0.4, 0.6]
    assert not on["reached"] and on["group"]["smart_turn"] == "on"
    lines = cutoff_lines({"cutoff_2pct": [off, on]})
    assert "reached at stop_secs=0.4, endpointing p50 500 ms, voice-to-voice p50 1,000 ms" \
        in lines[0]
    assert "not reached (lowest 3.0% of 60 at stop_secs=0.6)" in lines[1]


def test_without_paused_turns_the_2_percent_point_counts_all_turns():
    variants = [{"stop_secs": 0.3, "sweep": [_point(1, 0.03, None, 700, paused_turns=0),
                                             _point(4, 0.09, None, 900, paused_turns=0)]}]
    one, four = cutoff_points(variants)
    assert one["basis"] == "all turns" and one["reached"]     # 0.03 / 3 = 1 % of all turns
    assert one["endpointing_p50_ms"] is None and one["voice_to_voice_p50_ms"] == 700
    assert four["concurrency"] == 4 and not four["reached"]   # 3 %


def test_the_report_shows_pause_lengths_slot_answers_and_the_hold_out():
    turns = ([_turn("paused", (300,)), _turn("paused", (800,), cut=True)]
             + [_turn("slot", v2v_ms=ms) for ms in range(300, 1400, 100)]
             + [_turn("question", voice="jm_kumo")])
    stats = turn_stats(turns, holdout_voices=("jm_kumo",))
    samples = {"voice_to_voice_ms": [500.0, 600.0]}
    report = build_report(kind="voice", config={"stop_secs": 0.3, "corpus": {
        "holdout_voices": ["jm_kumo"], "development_voices": ["en-us"]}},
        points=[SweepPoint(concurrency=1, samples=samples, turns=len(turns), errors=1,
                           turn_stats=stats)])
    report["cutoff_2pct"] = cutoff_points([{"stop_secs": 0.3, "sweep": report["sweep"]}])
    lines = turn_taking_lines(report)
    text = "\n".join(lines)
    assert "Hold-out voices: jm_kumo. Development voices: en-us." in text
    assert "| 300 ms pauses cut | 800 ms pauses cut |" in text
    row = next(line for line in lines if line.startswith("| stop_secs=0.3 |"))
    assert "| 0.0% (0/1) | 100.0% (1/1) |" in row
    assert "| 800 / 1,200 (11) |" in row                      # slot answers p50 / p90 (n)
    assert "false cut-offs <= 2% of paused turns at 1 caller(s): not reached" in text
    assert "## Turn taking" in render_markdown(report)
    plain = build_report(kind="voice", config={}, points=[SweepPoint(concurrency=1, turns=1)])
    assert turn_taking_lines(plain) == []
