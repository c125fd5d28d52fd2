"""latency_bench.analysis: the tail decomposition names the stage that was made slow."""

import numpy as np
import pytest

from diffvoice.latency_bench.analysis import COMPONENTS, decompose, tail_findings


def _turns(rng, n, slow_stage=None, slow_ms=0.0):
    turns = []
    for i in range(n):
        parts = {"endpointing_ms": rng.normal(560, 20), "asr_ms": rng.normal(200, 30),
                 "llm_ttft_ms": rng.normal(150, 20), "tts_first_audio_ms": rng.normal(20, 3)}
        if slow_stage and i % 10 == 0:          # every tenth turn is slow in one stage
            parts[slow_stage] += slow_ms
        total = sum(parts.values()) + rng.normal(60, 5)
        turns.append({**parts, "voice_to_voice_ms": total, "server_ms": total - 560})
    return turns


def test_decompose_sums_to_the_total():
    rng = np.random.default_rng(0)
    turns = _turns(rng, 30)
    parts = decompose(turns)
    assert sum(parts[c] for c in COMPONENTS) + parts["other"] == pytest.approx(
        parts["voice_to_voice_ms"])
    assert parts["other"] == pytest.approx(60, abs=5)
    assert decompose([{"voice_to_voice_ms": 1.0}]) is None     # components missing


@pytest.mark.parametrize("stage", ["asr_ms", "llm_ttft_ms"])
def test_findings_name_the_slow_stage(stage):
    rng = np.random.default_rng(1)
    per_level = {1: _turns(rng, 40), 4: _turns(rng, 40, slow_stage=stage, slow_ms=1500.0)}
    findings = tail_findings(per_level)
    assert len(findings) == 3
    short = stage.removesuffix("_ms")
    assert f"Largest share in the tail: {short}" in findings[1]
    assert f"median-or-faster turns: {short}" in findings[1]
    assert findings[2].startswith("From 1 session to 4")
    # 40 turns per level is too few for a p99 (report.PERCENTILE_MIN_SAMPLES): max instead
    assert f"Change in max by stage: {short} +" in findings[2]      # ranked first
    assert "p99" not in " ".join(findings)
    max_low = max(t["voice_to_voice_ms"] for t in per_level[1])
    assert f"max {max_low:,.0f} ms (40 turns)" in findings[0]


def test_findings_quote_p99_with_enough_turns():
    rng = np.random.default_rng(3)
    per_level = {1: _turns(rng, 120), 2: _turns(rng, 120, slow_stage="asr_ms", slow_ms=900.0)}
    findings = tail_findings(per_level)
    p99_low = np.percentile([t["voice_to_voice_ms"] for t in per_level[1]], 99)
    assert f"p99 {p99_low:,.0f} ms (120 turns)" in findings[0]
    assert "Change in p99 by stage: asr +" in findings[2]


def test_no_turns_no_findings():
    assert tail_findings({}) == []
    assert tail_findings({2: []}) == []


def test_overlapping_stages_give_no_negative_other():
    """Recognition overlaps the turn-end decision: stages can add up to more than the whole.
    The finding says by how much instead of printing a negative 'other'."""
    rng = np.random.default_rng(3)
    turns = _turns(rng, 40)
    for t in turns:
        t["voice_to_voice_ms"] -= 400.0  # asr ran during endpointing: 400 ms counted twice
    finding = tail_findings({1: turns})[0]
    assert "other" not in finding and " -" not in finding and "(-" not in finding
    assert "exceed voice_to_voice by 3" in finding  # ~340 ms (400 less the 60 ms other)
