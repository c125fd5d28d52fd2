"""The ASR development set (agent/train/dev_asr.py): training questions as recognisers wrote
them, run through the served path; never the evaluation sets."""

from __future__ import annotations

import json

from diffvoice.agent.data import DataGenerator
from diffvoice.agent.facts import load_facts
from diffvoice.agent.train.asr_augment import load_cache
from diffvoice.agent.train.dev_asr import dev_examples, run
from diffvoice.agent.train.independent import INDEPENDENT_ASR_PATH, load_independent
from diffvoice.engine.assets import default_model_dir


def test_dev_rows_are_training_questions_with_the_fact_sheets_answers():
    gen = DataGenerator(load_facts(default_model_dir() / "facts.yaml"))
    rows = load_cache()
    examples = dev_examples(gen)
    assert 1000 < len(examples) < len(rows)  # booking openers are left out
    assert {ex.intent for ex in examples}.isdisjoint({"book", "cancel", "availability"})
    for ex in examples[::50]:
        assert (ex.answer, ex.facts) == gen.answer(ex.intent, ex.slot)
    # nothing the evaluation sets say, as text or as heard
    said = {item["q"].lower() for item in load_independent()}
    heard = {json.loads(line)["heard"].lower()
             for line in INDEPENDENT_ASR_PATH.read_text(encoding="utf-8").splitlines() if line}
    assert not said & {ex.question.lower() for ex in examples}
    assert len(heard & {ex.question.lower() for ex in examples}) < 0.01 * len(examples)


def test_a_short_dev_run_scores_like_eval_model():
    report = run(limit=6)
    assert report["n"] == 6 == report["summary"]["n"]
    right = report["summary"]["accuracy"] * 6
    assert abs(right - (6 - len(report["failures"]))) < 1e-9
    assert sum(s["n"] for s in report["per_recogniser"].values()) == 6
