"""Fact sheet validation and the data generator: answers state their facts, held-out templates
never reach training data."""

import random

import pytest
import yaml

from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.facts import DEFAULT_FACTS_PATH, load_facts, parse_facts
from diffvoice.agent.templates import FACT_INTENTS, QUESTIONS


@pytest.fixture(scope="module")
def gen():
    return DataGenerator(load_facts())


def _core(question: str) -> str:
    return normalize(question)


def test_heldout_questions_never_appear_in_training(gen):
    rng = random.Random(7)
    train = [gen.sample_train(rng) for _ in range(20000)]
    heldout_ids = {t.text for _, held in gen.questions.values() for t in held}
    assert not heldout_ids & {ex.template for ex in train}
    evals = gen.eval_set(seed=3, per_template=2)
    assert len(evals) > 100
    train_questions = {_core(ex.question) for ex in train}
    leaked = [ex.question for ex in evals if _core(ex.question) in train_questions]
    assert not leaked, leaked[:5]
    # stronger: no rendering of a held-out template equals any rendering of a training one
    assert not gen.core_strings(heldout=True) & gen.core_strings(heldout=False)


def test_colliding_heldout_template_is_rejected(monkeypatch):
    train, held = QUESTIONS["phone"]
    monkeypatch.setitem(QUESTIONS, "phone", (train, held + ["phone number please"]))
    with pytest.raises(ValueError, match="held-out templates also render"):
        DataGenerator(load_facts())


def test_every_intent_has_an_answer_stating_its_facts(gen):
    rng = random.Random(1)
    seen = set()
    for _ in range(3000):
        ex = gen.sample_train(rng)
        seen.add(ex.intent)
        assert ex.question.strip() and ex.answer.strip()
        assert all(normalize(f) in normalize(ex.answer) for f in ex.facts), ex
    expected = set(QUESTIONS) | {f"faq:{item.id}" for item in gen.facts.faq}
    assert expected <= seen  # plus the booking / tool / follow-up intents of dialogues.py
    assert {"book", "availability", "cancel"} <= seen
    sunday = gen.answer("hours_day", "sunday")
    assert "closed" in sunday[0]
    week, facts = gen.answer("hours_week")
    assert "8 am to 5 pm" in week and "Sundays" in week and len(facts) == 4
    assert gen.answer("price", "crowns")[0] == "A crown is 900 dollars."
    assert set(FACT_INTENTS) <= set(QUESTIONS)


def test_training_questions_vary_like_asr_output(gen):
    rng = random.Random(2)
    questions = [gen.sample_train(rng).question for _ in range(2000)]
    assert any(q[0].isupper() for q in questions) and any(q[0].islower() for q in questions)
    assert any(q.endswith("?") for q in questions) and any(q[-1].isalpha() for q in questions)
    assert any(q.lower().startswith(("um", "uh")) for q in questions)
    assert len(set(questions)) > 1500


def test_bad_fact_sheets_name_the_field():
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    doc["hours"]["monday"] = "from nine"
    with pytest.raises(ValueError, match="hours.monday"):
        parse_facts(doc)
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    doc["faq"][0]["fact"] = "not in the answer"
    with pytest.raises(ValueError, match="faq\\[insurance\\].fact"):
        parse_facts(doc)
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    doc["services"][1]["aliases"].append("checkup")
    with pytest.raises(ValueError, match="alias 'checkup'"):
        parse_facts(doc)
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    del doc["contact"]["phone"]
    with pytest.raises(ValueError, match="contact.phone"):
        parse_facts(doc)
