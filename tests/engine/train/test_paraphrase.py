"""Paraphrase snapping (engine.train.paraphrase) with the real all-MiniLM-L6-v2 encoder: the bank
is the training questions only, snapping swaps close fact / small-talk paraphrases and nothing
else, the stored bank is used only when it matches, and the engine applies the hook."""

from __future__ import annotations

import asyncio
import shutil

import pytest
import torch

from diffvoice.engine.assets import default_model_dir
from diffvoice.engine.train.data import DataGenerator, normalize
from diffvoice.engine.train.facts import load_facts
from diffvoice.engine.train.independent import independent_examples
from diffvoice.engine.train.paraphrase import (
    BANK_FILE,
    Encoder,
    ParaphraseSnap,
    _stored,
    bank_entries,
)

MODEL = default_model_dir()


@pytest.fixture(scope="module")
def snap():
    return ParaphraseSnap.for_model(MODEL, save=False)


def test_encoder_rows_are_unit_length_and_similarity_is_meaningful():
    enc = Encoder.shared()
    e = enc.encode(["where are you located", "what is your address", "how much is a crown"])
    assert e.shape == (3, 384) and torch.allclose(e.norm(dim=1), torch.ones(3), atol=1e-5)
    assert float(e[0] @ e[1]) > float(e[0] @ e[2]) + 0.2


def test_bank_holds_training_questions_only(snap):
    gen = DataGenerator(load_facts(MODEL / "facts.yaml"))
    bank = {normalize(e.text) for e in snap.entries}
    # held-out templates (the template eval set) are never in the bank ...
    heldout = {normalize(ex.question) for ex in gen.eval_set(1234, 1)}
    assert not bank & heldout
    # ... nor the hand-written independent questions
    independent = {normalize(ex.question) for ex in independent_examples(gen)}
    assert not bank & independent
    # every swap target's recorded reply is the generator's answer for some unit; openers are not
    answers = set(gen.all_answers())
    assert all(e.reply in answers for e in snap.entries if e.swap)
    assert any(not e.swap for e in snap.entries) and sum(e.swap for e in snap.entries) > 1000


def test_snaps_close_paraphrases_and_leaves_the_rest(snap):
    s = snap.snap("do you guys take apple pay")  # a phrasing the templates never use
    assert s.swapped and s.similarity >= snap.threshold
    assert snap.entries[[e.text for e in snap.entries].index(s.text)].reply == \
        "We take cash, all major cards, and Apple Pay."
    low = ParaphraseSnap(snap.entries, snap.embeddings, snap.encoder, threshold=0.6)
    assert low.snap("whereabouts are you").text == "where are you located"
    # nearest: a booking opener: at most another opener with the same service (next test)
    book = snap.snap("i'd like to book a cleaning")
    assert not {e.text: e for e in snap.entries}[book.nearest].swap and "clean" in book.text
    assert not snap.snap("the quarterly tax filing deadline").swapped  # nothing close
    first = [{"role": "system", "content": "be nice"},
             {"role": "user", "content": "do you guys take apple pay"}]
    out = snap.rewrite(first)
    assert out[-1]["content"] == s.text and first[-1]["content"] == \
        "do you guys take apple pay" and out[0] is first[0]
    follow = [{"role": "user", "content": "how much is a crown"},
              {"role": "assistant", "content": "A crown is 900 dollars."},
              {"role": "user", "content": "do you guys take apple pay"}]
    assert snap.rewrite(follow) is follow  # a later turn keeps its words (context matters)
    never = ParaphraseSnap(snap.entries, snap.embeddings, snap.encoder, threshold=1.0)
    assert never.rewrite(first) is first


def test_a_booking_opener_is_heard_as_a_training_opener_with_the_same_values(snap):
    """The nearest question is a booking / availability / cancel opener: the message is heard as
    the most similar training opener of that intent stating exactly the caller's values (never
    one more or one less); with no value stated, or a value no opener holds, unchanged."""
    from diffvoice.engine.train.slot_reading import slot_signature

    sig = slot_signature(load_facts(MODEL / "facts.yaml"))
    s = snap.snap("got any time on friday for teeth cleaning")
    assert s.swapped and sig(s.text) == sig("friday cleaning") and "friday" in s.text
    entry = {e.text: e for e in snap.entries}[s.text]
    assert not entry.swap and entry.intent == "availability"
    assert not snap.snap("what if i cancel last minute").swapped  # no value: maybe a question
    assert sig("at 8 30") == sig("at 8:30 am")  # times on the book's grid only (no 20:30)
    # a name no training opener holds: compared without it, given back in the training words
    named = snap.snap("scrap my appointment on friday and i'm zebulon quartz")
    assert named.swapped and named.text.endswith(" my name is zebulon quartz")
    assert sig(named.text) == sig("friday, i'm zebulon quartz")
    assert not snap.snap("book a crown for zebulon or for quartz on friday").swapped  # two names
    # held-out openers of the generator (another seed than the eval set's): a swap keeps
    # every value and the intent of the nearest opener
    gen = DataGenerator(load_facts(MODEL / "facts.yaml"))
    import random

    rng, swapped = random.Random(77), 0
    for _ in range(60):
        turn = gen.dialogues.sample(rng, "heldout")
        if len(turn.messages) != 1:
            continue
        text = turn.messages[0]["content"]
        out = snap.snap(text)
        if out.swapped and not {e.text: e for e in snap.entries}[out.nearest].swap:
            swapped += 1
            assert sig(out.text) == sig(text) and any(sig(text)), (text, out.text)
    assert swapped >= 5


def test_a_slot_answer_is_reduced_to_its_value_and_nothing_else(snap):
    """A later turn answering the assistant's slot question with nothing but the value is heard
    as the value, in the words the training answers use; anything more is left as said."""
    from diffvoice.engine.train.dialogue_phrases import say_time
    from diffvoice.engine.train.slot_reading import slot_answer_reader
    from diffvoice.engine.train.tool_schemas import spoken_time

    reader = slot_answer_reader(load_facts(MODEL / "facts.yaml"))

    def heard(question, answer):
        return reader([{"role": "user", "content": "i'd like to book"},
                       {"role": "assistant", "content": question},
                       {"role": "user", "content": answer}])

    name_q = "And what name should I put a crown on Tuesday at 4 pm under?"
    assert heard(name_q, "you can put Hugo Hayes") == "hugo hayes"
    assert heard(name_q, "you can put hugo and what is your address") is None
    time_q = "What time on Saturday would you like to come in for a filling?"
    assert heard(time_q, "let's say 3 p.m.") == "3 pm"
    assert heard(time_q, "saturday at 10") is None  # a day too: left as said
    assert heard("Sure, what day would you like to come in for a crown?", "maybe friday") == \
        "friday"
    assert heard("Sure, what would you like to come in for?", "for urgent visit") == \
        "an emergency visit"
    assert heard("We're open 8 am to 5 pm.", "friday") is None  # no slot was asked
    # every time the generator's callers say, in any answer phrasing, keeps its value
    import random

    rng = random.Random(5)
    for t in ("08:30", "10:00", "12:00", "13:30", "15:00", "16:30"):
        for form in ("{t}", "let's say {t}", "{t} works for me", "um {t} please"):
            said = form.format(t=say_time(t, rng))
            assert heard(time_q, said) == spoken_time(t), said
    # the engine hook: only the last message changes, and only when reducible
    msgs = [{"role": "user", "content": "i'd like to book a crown on tuesday at 4 pm"},
            {"role": "assistant", "content": name_q},
            {"role": "user", "content": "that would be ivy quinn"}]
    out = snap.rewrite(msgs)
    assert out[-1]["content"] == "ivy quinn" and out[:2] == msgs[:2] \
        and msgs[-1]["content"] == "that would be ivy quinn"
    msgs[-1] = {"role": "user", "content": "how much is it"}
    assert snap.rewrite(msgs) is msgs


def test_stored_bank_is_used_only_when_it_matches(tmp_path, monkeypatch):
    import diffvoice.engine.train.paraphrase as P

    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(MODEL / "facts.yaml", model / "facts.yaml")
    small = bank_entries(DataGenerator(load_facts(MODEL / "facts.yaml")))[::200]
    monkeypatch.setattr(P, "_entries_for", lambda text: tuple(small))
    monkeypatch.setattr(P, "_BANKS", {})
    built = ParaphraseSnap.for_model(model)
    assert (model / BANK_FILE).is_file() and len(built.entries) == len(small)
    digest = P._digest(small)
    stored = _stored(model / BANK_FILE, digest)
    assert torch.allclose(stored, built.embeddings, atol=2e-3)  # float16 on disk
    assert _stored(model / BANK_FILE, "another digest") is None
    (model / BANK_FILE).write_bytes(b"damaged")
    assert _stored(model / BANK_FILE, digest) is None


def test_engine_applies_the_hook_in_a_worker_thread_and_survives_its_errors(tmp_path):
    import threading

    from diffvoice.engine import Engine, EngineConfig, SamplingParams
    from diffvoice.engine.testing import make_random_checkpoint

    engine = Engine.from_pretrained(make_random_checkpoint(tmp_path / "m", family="sdar"),
                                    EngineConfig(max_running=2))
    seen = []

    def rewrite(messages):
        seen.append((threading.current_thread() is threading.main_thread(), messages))
        return [{"role": "user", "content": "a much longer question " * 4}]

    async def prompt_tokens(messages):
        last = None
        async for d in engine.generate(messages, SamplingParams(max_new_tokens=8)):
            last = d
        return last.prompt_tokens

    try:
        plain = asyncio.run(prompt_tokens([{"role": "user", "content": "hi"}]))
        engine.rewrite_messages = rewrite
        assert asyncio.run(prompt_tokens([{"role": "user", "content": "hi"}])) > plain + 10
        assert seen == [(False, [{"role": "user", "content": "hi"}])]

        def broken(messages):
            raise RuntimeError("encoder gone")

        engine.rewrite_messages = broken
        assert asyncio.run(prompt_tokens([{"role": "user", "content": "hi"}])) == plain
    finally:
        engine.close()
