"""The shipped models/receptionist-tiny through the public loader and Engine: it loads, answers
held-out questions (templates never seen in training) with the right fact at the default decoding
setting, and ends its replies by itself. Also drives `diffvoice eval-model` on it."""

import argparse
import asyncio
import json

import pytest

from diffvoice.agent.data import DataGenerator
from diffvoice.agent.facts import load_facts
from diffvoice.agent.train.cli import add_eval_arguments, run_eval
from diffvoice.agent.train.evaluate import score
from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig, SamplingParams
from diffvoice.engine.loader import load_checkpoint

pytestmark = pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "model.safetensors").is_file(),
                                reason="models/receptionist-tiny not present")


def test_shipped_checkpoint_is_small_and_block_causal():
    files = sum(p.stat().st_size for p in DEFAULT_MODEL_DIR.iterdir() if p.is_file())
    assert files < 40 * 2**20
    loaded = load_checkpoint(DEFAULT_MODEL_DIR)
    cfg = loaded.config
    assert cfg.family == "sdar" and cfg.block_size == 8
    assert cfg.mask_token_id == loaded.tokenizer.token_id("<|mask|>")
    assert loaded.tokenizer.token_id("<|end|>") in cfg.eos_token_ids


def test_shipped_model_answers_heldout_questions_with_the_right_fact():
    gen = DataGenerator(load_facts(DEFAULT_MODEL_DIR / "facts.yaml"))
    facts = [e for e in gen.eval_set(seed=1234) if e.kind == "fact"]
    picks = facts[:: len(facts) // 12][:12]  # evenly spaced over intents; fixed, not chosen
    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(max_running=4))
    params = SamplingParams(max_new_tokens=64)  # the default: low_confidence, 4 steps per block

    async def ask(example):
        deltas = [d async for d in engine.generate(
            [{"role": "system", "content": "You are a friendly phone receptionist."},
             {"role": "user", "content": example.question}], params)]
        return "".join(d.text for d in deltas), deltas[-1].finish_reason

    async def ask_all():
        return await asyncio.gather(*(ask(e) for e in picks))

    try:
        replies = asyncio.run(ask_all())
    finally:
        engine.close()
    correct = [score(e, text)[0] for e, (text, _) in zip(picks, replies, strict=True)]
    report = [(e.question, text, ok) for e, (text, _), ok in zip(picks, replies, correct,
                                                                  strict=True)]
    assert sum(correct) >= 10, report
    assert all(reason == "stop" for _, reason in replies), report


def test_eval_model_cli_reports_every_setting(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    add_eval_arguments(parser)
    out = tmp_path / "eval.json"
    args = parser.parse_args(["--limit", "4", "--settings", "low_confidence:2", "threshold:0.9",
                              "--no-chitchat", "--dialogues", "8", "--episodes", "2",
                              "--out", str(out)])
    assert run_eval(args) == 0
    printed = capsys.readouterr()
    table = printed.out
    # progress on stderr: the work up front, then each set with the time left
    lines = printed.err.splitlines()
    assert any(line.startswith("eval-model: ") and "closed-loop calls to run" in line
               for line in lines)
    done = [line for line in lines if "min left)" in line]
    assert len(done) >= 8 and "(100%," in done[-1] and "~0.0 min left" in done[-1]
    assert "| low_confidence:2 | template |" in table and "| threshold:0.9 | independent |" in table
    assert "| low_confidence:2 | dialogue+tools |" in table and "closed loop (tools)" in table
    report = json.loads(out.read_text())
    assert report["paths"] == ["free", "tools"]
    for spec, res in report["settings"].items():
        assert {"template", "dialogue", "independent", "all", "dialogue+tools", "all+tools"} \
            <= set(res)
        assert res["dialogue+tools"]["summary"]["n"] == 4
        for path in ("free", "tools"):
            ep = report["episodes"][spec][path]
            assert ep["n"] == 2 and 0 <= ep["success_rate"] <= 1 and ep["mean_model_turns"] >= 1
        s = res["template"]["summary"]
        assert s["n"] == 4 and s["latency_mean_s"] > 0 and 0 <= s["well_formed_rate"] <= 1
        assert res["dialogue"]["summary"]["n"] == 4
        spoken = [k for k in res if k.startswith("spoken")]
        assert "spoken-kokoro:whisper-tiny.en+tools" in spoken
        for name in spoken:  # each spoken set is split by how it was heard
            h, s = res[name]["hearing"], res[name]["summary"]
            assert h["n"] == s["n"] == sum(v["n"] for v in h["per_voice"].values())
            assert 0 <= h["heard_exactly_rate"] <= 1 and h["wer"] >= 0
    assert "| low_confidence:2 | spoken-kokoro:whisper-tiny.en+tools, as heard | WER" in table
    # an empty question set (no dialogues) is reported, not a crash in the merged row
    only = parser.parse_args(["--limit", "2", "--no-chitchat", "--dialogues", "0",
                              "--no-independent", "--episodes", "0", "--paths", "tools",
                              "--out", str(out)])
    assert run_eval(only) == 0
    merged = json.loads(out.read_text())["settings"]["low_confidence:4"]["all+tools"]["summary"]
    assert merged["n"] == 2 and 0 <= merged["well_formed_rate"] <= 1
    bad = parser.parse_args(["--settings", "nonsense:3", "--limit", "1"])
    assert run_eval(bad) == 2
    assert "nonsense:3" in capsys.readouterr().err
