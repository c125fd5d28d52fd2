"""The matrix report and the per-turn statistics on synthetic turn results: turn_stats counts
what it says, combine() keeps every variant and picks the headline (fastest among those that
cut callers off at most 2 % of the time), the Markdown shows the configuration table and the
goals, parse_matrix reads the four axes and rejects bad ones, each axis lands on the server or
the session as the protocol needs; the paused corpus has the pauses it promises."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from diffvoice.latency_bench.config import BenchConfig, parse_matrix
from diffvoice.latency_bench.corpus import DECAY_S, PAUSED_PROMPTS, paused_corpus
from diffvoice.latency_bench.load import LevelResult, make_report, turn_stats
from diffvoice.latency_bench.markdown import render_markdown
from diffvoice.latency_bench.matrix import (
    combinations,
    combine,
    server_axes,
    server_flags,
    session_config,
)
from diffvoice.latency_bench.turns import TurnResult


def _turn(i, v2v_ms, hit, ready, premature=False, voice="en-us", transcript=None,
          pauses=()):
    t = TurnResult(concurrency=1, session=0, turn=i, prompt="what time do you open",
                   voice=voice, speech_end_t=100.0, first_audible_t=100.0 + v2v_ms / 1000,
                   kind="paused" if pauses else "question", pauses_ms=pauses)
    t.transcript = transcript or "what time do you open"
    t.server = {"draft_hit": hit, "drafts": 2, "extra_passes": 6, "answer_passes": 4,
                "answer_ready": ready, "turn_end_t": 100.3, "vad_stop_t": 100.25}
    if premature:
        t.premature_eot = True
        t.fail("error", "premature")
    return t


def test_turn_stats_count_rates_and_wer_per_voice():
    turns = [_turn(1, 400, True, True), _turn(2, 500, True, False),
             _turn(3, 600, False, False, voice="en-gb", transcript="what do you open"),
             _turn(4, 700, True, True, premature=True, voice="en-gb")]
    stats = turn_stats(turns)
    assert stats["draft_hit_rate"] == 0.75 and stats["answer_ready_rate"] == 0.5
    assert stats["drafts_per_turn"] == 2 and stats["extra_passes_per_turn"] == 6
    assert stats["premature_eot_rate"] == 0.25 and stats["premature_eot"] == 1
    assert stats["wer_by_voice"] == {"en-gb": round(1 / 10, 4), "en-us": 0.0}


def _variant(drafting, v2v_ms, stop_secs=0.2, cut=0):
    config = BenchConfig(concurrency=(1,), eager_drafts=drafting == "on", stop_secs=stop_secs)
    level = LevelResult(level=1, turns=[_turn(i, v2v_ms, drafting == "on", True,
                                              premature=i <= cut, pauses=(450,))
                                        for i in range(1, 5)])
    report = make_report(config, [level], url="ws://127.0.0.1:1/ws", corpus={"prompts": 4})
    return {"asr": "pocketsphinx", "smart_turn": "server default", "drafting": drafting,
            "stop_secs": stop_secs, "report": report}


def test_combine_keeps_every_variant_and_checks_the_goals():
    report = combine([_variant("off", 300), _variant("on", 420)],
                     {"drafting": ("off", "on"), "asr": ("pocketsphinx",)})
    assert [(v["drafting"], round(v["sweep"][0]["stages"]["voice_to_voice_ms"]["p50"]))
            for v in report["matrix"]] == [("off", 300), ("on", 420)]
    # the headline is the best drafting=on variant, even if an off variant is faster
    assert report["config"]["headline"] == {"asr": "pocketsphinx", "drafting": "on",
                                            "smart_turn": "server default", "stop_secs": 0.2}
    assert {t["variant"]["drafting"] for t in report["turns"]} == {"off", "on"}
    goals = [line for line in report["analysis"] if line.startswith("goal")]
    assert any("p50 <= 450 ms" in g and "420 ms, met" in g for g in goals)
    assert any("answer ready" in g and "100.0%, met" in g for g in goals)
    md = render_markdown(report)
    assert "## Configurations" in md
    assert "| pocketsphinx | server default | on | 0.2 | 1 | 4 |" in md


def test_headline_skips_variants_that_cut_callers_off():
    fast_but_cutting = _variant("on", 300, stop_secs=0.2, cut=1)      # 1 of 4 paused turns cut
    safe = _variant("on", 500, stop_secs=0.6)
    report = combine([fast_but_cutting, safe], {"stop_secs": ("0.2", "0.6")})
    assert report["config"]["headline"]["stop_secs"] == 0.6
    (cutoff,) = report["cutoff_2pct"]
    assert cutoff["reached"] and cutoff["stop_secs"] == 0.6 and cutoff["basis"] == "paused turns"
    assert [p["premature_rate"] for p in cutoff["points"]] == [0.25, 0.0]
    assert {t["variant"]["stop_secs"] for t in report["turns"]} == {0.2, 0.6}


@pytest.mark.parametrize("text", ["drafting=maybe", "speed=1", "asr=", "drafting=on drafting=off",
                                  "smart_turn=yes", "stop_secs=0.2,fast", "stop_secs=9",
                                  "stop_secs=0.2,0.20", "asr=a,a"])
def test_parse_matrix_rejects_bad_axes(text):
    with pytest.raises(ValueError):
        parse_matrix(text)


def test_parse_matrix():
    assert parse_matrix("drafting=off,on asr=pocketsphinx,whisper-tiny.en") == {
        "drafting": ("off", "on"), "asr": ("pocketsphinx", "whisper-tiny.en")}
    assert parse_matrix("smart_turn=off,on stop_secs=.2,0.30,1") == {
        "smart_turn": ("off", "on"), "stop_secs": ("0.2", "0.3", "1.0")}


def test_axes_go_to_the_server_or_the_session_as_the_protocol_needs():
    axes = parse_matrix("asr=pocketsphinx smart_turn=off,on stop_secs=0.2,0.4 drafting=on")
    assert server_axes(axes, "browser") == (["asr", "smart_turn"], ["stop_secs", "drafting"])
    assert server_axes(axes, "twilio") == (["asr", "smart_turn", "stop_secs"], ["drafting"])
    servers = combinations(axes, ["asr", "smart_turn"])
    assert [server_flags(c) for c in servers] == ["--asr pocketsphinx --no-smart-turn",
                                                  "--asr pocketsphinx --smart-turn"]
    assert server_flags({"stop_secs": "0.4"}) == "--stop-secs 0.4"
    assert combinations(axes, []) == [{}]
    sessions = combinations(axes, ["stop_secs", "drafting"])
    assert sessions == [{"stop_secs": "0.2", "drafting": "on"},
                        {"stop_secs": "0.4", "drafting": "on"}]
    config = session_config(BenchConfig(matrix="stop_secs=0.2,0.4"), sessions[1])
    assert config.stop_secs == 0.4 and config.eager_drafts is True and config.matrix is None


def test_paused_corpus_has_its_pauses(tmp_path: Path):
    pytest.importorskip("soundfile")
    import shutil
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng not installed")
    (prompt,) = paused_corpus(PAUSED_PROMPTS[:1], ["en-us"], [175], tmp_path,
                              pauses_ms=(450,))
    assert prompt.text == "what time um do you open on saturday" and prompt.voice == "en-us"
    x = prompt.pcm.astype(np.float64) / 32768
    windows = x[: len(x) // 160 * 160].reshape(-1, 160)                 # [W, 10 ms]
    quiet = 10 * np.log10((windows ** 2).mean(axis=1) + 1e-12) < -45
    runs, run = [], 0
    for q in quiet[int(prompt.speech_start_s * 100): int(prompt.speech_end_s * 100)]:
        run = run + 1 if q else (runs.append(run) or 0) if run else 0
    # two 450 ms pauses of silence, each after a piece's fade (DECAY_S: up to 60 ms more below
    # -45 dB), in 10 ms windows
    pauses = sorted(r for r in runs if r >= 20)
    assert len(pauses) == 2 and all(45 <= r <= 45 + DECAY_S * 100 for r in pauses), pauses
