"""Training-data rewrites: restarts and hesitations, questions inside unrelated talk, stray words,
made-up caller names (never a held-out one) and their use in generated bookings."""

import json
import random

from diffvoice.agent.data import DataGenerator
from diffvoice.agent.dialogue_phrases import FIRST_HELD, LAST_HELD, made_up_name
from diffvoice.agent.facts import load_facts
from diffvoice.agent.variants import HESITATIONS, disfluent, in_context, stray_words


def test_disfluent_keeps_every_word_and_adds_a_restart_hesitation_or_repeat():
    rng = random.Random(0)
    text = "can i book a cleaning on friday"
    outs = [disfluent(text, rng) for _ in range(300)]
    def subsequence(small, big):
        it = iter(big)
        return all(w in it for w in small)

    assert all(subsequence(text.split(), o.split()) for o in outs)
    assert any(o.startswith("can i can i") or o.startswith("can can") for o in outs)
    assert any(h in o.split() for o in outs for h in HESITATIONS)
    assert all(len(o.split()) > len(text.split()) for o in outs)
    assert disfluent("hello", rng) == "hello"


def test_in_context_and_stray_words_keep_the_question_whole():
    rng = random.Random(1)
    q = "what are your hours on saturday"
    for _ in range(50):
        assert q in in_context(q, "I love hiking in the fall.", rng)
        out = stray_words(q, ["banana", "rocket"], rng).split()
        assert [w for w in out if w not in ("banana", "rocket")] == q.split()
        assert 1 <= len(out) - len(q.split()) <= 2


def test_made_up_names_are_words_and_training_callers_use_them_never_held_out_names():
    rng = random.Random(2)
    names = {made_up_name(rng) for _ in range(500)}
    assert len(names) > 400 and all(n.isalpha() and n.islower() for n in names)
    gen = DataGenerator(load_facts())
    rng = random.Random(3)
    called = []
    for _ in range(400):
        turn = gen.dialogues.sample(rng, "train", "cancel_result")
        args = json.loads(turn.messages[1]["tool_calls"][0]["function"]["arguments"])
        called += args["name"].split()
    held = set(FIRST_HELD) | set(LAST_HELD)
    assert not held & set(called)
    assert len(set(called)) > 150  # far more callers than the hand-written name lists


def test_chitchat_distractions_appear_in_training_questions():
    gen = DataGenerator(load_facts(), use_chitchat=True)
    assert gen._chitchat_words and all(w.isalpha() for w in gen._chitchat_words)
    rng = random.Random(4)
    lines = {line.lower().rstrip("?.!") for line in gen.chitchat_train}
    hits = 0
    for _ in range(600):
        ex = gen._single(rng)
        if ex.intent != "out_of_scope" and any(line in ex.question for line in lines):
            hits += 1
    assert hits > 10
