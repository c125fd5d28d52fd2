"""Answer quality beside latency (latency_bench/quality.py) and the sample-size rule, rendered."""

from __future__ import annotations

import functools
import random

import pytest

from diffvoice.agent.facts import default_facts_path
from diffvoice.latency_bench.markdown import render_markdown
from diffvoice.latency_bench.quality import RECEPTIONIST_FACTS, sweep_quality, task_success
from diffvoice.latency_bench.report import SweepPoint, build_report, enough_samples, shown
from diffvoice.latency_bench.stats import summarize
from diffvoice.latency_bench.wer import word_edits


def _wer_reference(ref: list[str], hyp: list[str]) -> int:
    """Edit distance by plain recursion with memo (the textbook definition)."""
    @functools.cache
    def d(i: int, j: int) -> int:
        if i == 0 or j == 0:
            return i + j
        return min(d(i - 1, j) + 1, d(i, j - 1) + 1, d(i - 1, j - 1) + (ref[i - 1] != hyp[j - 1]))
    return d(len(ref), len(hyp))


def test_wer_matches_the_textbook_edit_distance_on_random_sentences():
    rng = random.Random(5)
    vocab = ["when", "are", "you", "open", "on", "saturday", "the", "a"]
    for _ in range(200):
        ref = [rng.choice(vocab) for _ in range(rng.randint(1, 8))]
        hyp = [rng.choice(vocab) for _ in range(rng.randint(0, 8))]
        assert word_edits(" ".join(ref), " ".join(hyp)) == (_wer_reference(ref, hyp), len(ref))
    assert word_edits("When are you open on Saturday?", "when are you open on saturday") == (0, 6)
    assert word_edits("What is your phone number?", None) == (5, 5)


def test_expected_facts_are_the_shipped_fact_sheets_values():
    sheet = default_facts_path().read_text().lower()
    for facts in RECEPTIONIST_FACTS.values():
        assert all(fact.lower() in sheet for fact in facts), facts


def test_task_success_uses_the_turns_own_expected_fact_first():
    turn = {"prompt": "How much does a cleaning cost?", "bot_text": "A cleaning is 95 dollars."}
    assert task_success(turn) is True
    assert task_success({**turn, "bot_text": "It is 150 dollars."}) is False
    assert task_success({**turn, "expected": ["150 dollars"], "bot_text": "150 dollars."})
    assert task_success({"prompt": "Do you take new patients?", "bot_text": "yes"}) is None


def _turn(level, prompt, transcript, bot, status="ok"):
    return {"concurrency": level, "prompt": prompt, "transcript": transcript, "bot_text": bot,
            "status": status}


def test_quality_columns_beside_latency_in_the_report():
    points = [SweepPoint(concurrency=c, samples={"voice_to_voice_ms": [500.0 + i for i in
                                                                        range(n)]}, turns=n)
              for c, n in ((1, 3), (2, 120))]
    report = build_report(kind="voice", config={"server": {"machine": {"cpu": "EPYC x2"}},
                                                "machine": {"cpu": "laptop"}}, points=points)
    report["turns"] = [
        _turn(1, "When are you open on Saturday?", "when are you open on saturday",
              "We are open 9 am to 1 pm on Saturday."),
        _turn(1, "How much does a cleaning cost?", "how much is a cleaning cost",
              "A filling is 150 dollars."),
        _turn(1, "What is your phone number?", None, "", status="timeout"),
    ]
    quality = sweep_quality(report)
    assert quality[1] == {"wer": 1 / 12, "wer_turns": 2, "task_success": 0.5, "task_turns": 2}
    assert quality[2]["wer"] is None and quality[2]["task_turns"] == 0
    md = render_markdown(report)
    assert "ASR WER (n)" in md and "task success (n)" in md
    assert "| 8% (2) | 50% (2) |" in md
    # the sweep's tail column is what its smallest level supports: n = 3 -> max, for both
    assert "p50 / max (n)" in md and "501 / 502 (3)" in md
    assert "/ 619 (120)" in md
    p99 = report["sweep"][1]["stages"]["voice_to_voice_ms"]["p99"]
    assert f"| {p99:,.0f} | 619 |" in md                           # n = 120: its p99 below
    assert "- server machine: cpu=EPYC x2" in md and "- load generator machine: cpu=laptop" in md


@pytest.mark.parametrize("n, p90, p99", [(1, False, False), (9, False, False), (10, True, False),
                                          (99, True, False), (100, True, True)])
def test_sample_size_rule(n, p90, p99):
    summary = summarize(range(n))
    assert enough_samples(summary, "p90") is p90 and enough_samples(summary, "p99") is p99
    assert (shown(summary, "p99") is None) is (not p99)
    assert shown(summary, "p50") == summary["p50"] and shown(summarize([]), "p50") is None
