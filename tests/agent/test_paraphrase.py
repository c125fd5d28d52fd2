"""Paraphrase snapping (agent.paraphrase) with the real all-MiniLM-L6-v2 encoder: the bank
is the training questions only, snapping swaps close fact / small-talk paraphrases and nothing
else, the stored bank is used only when it matches, and the engine applies the hook."""

from __future__ import annotations

import shutil

import pytest
import torch

from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.facts import load_facts
from diffvoice.agent.paraphrase import (
    BANK_FILE,
    Encoder,
    ParaphraseSnap,
    _stored,
    bank_entries,
)
from diffvoice.agent.train.independent import independent_examples
from diffvoice.engine.assets import default_model_dir

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
    from diffvoice.agent.slot_reading import slot_signature

    sig = slot_signature(load_facts(MODEL / "facts.yaml"))
    s = snap.snap("got any time on friday for teeth cleaning")
    assert s.swapped and sig(s.text) == sig("friday cleaning") and "friday" in s.text
    entry = {e.text: e for e in snap.entries}[s.text]
    assert not entry.swap and entry.intent == "availability"
    # no value: maybe a question about cancelling, never heard as a cancel opener (the intent
    # head hears the policy question)
    policy = snap.snap("what if i cancel last minute")
    assert not policy.swapped or {e.text: e for e in snap.entries}[policy.text].swap
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
    from diffvoice.agent.dialogue_phrases import say_time
    from diffvoice.agent.slot_reading import slot_answer_reader
    from diffvoice.agent.tool_schemas import spoken_time

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
    import diffvoice.agent.paraphrase as P

    model = tmp_path / "m"
    model.mkdir()
    shutil.copy(MODEL / "facts.yaml", model / "facts.yaml")
    small = bank_entries(DataGenerator(load_facts(MODEL / "facts.yaml")))[::200]
    monkeypatch.setattr(P, "_entries_for", lambda text: tuple(small))
    monkeypatch.setattr(P, "_BANKS", {})
    built = ParaphraseSnap.for_model(model)
    assert (model / BANK_FILE).is_file() and len(built.entries) == len(small)
    assert (model / BANK_FILE).stat().st_mode & 0o777 == 0o644  # as the model's other files
    digest = P._digest(small)
    stored = _stored(model / BANK_FILE, digest)
    assert torch.allclose(stored, built.embeddings, atol=2e-3)  # float16 on disk
    assert _stored(model / BANK_FILE, "another digest") is None
    (model / BANK_FILE).write_bytes(b"damaged")
    assert _stored(model / BANK_FILE, digest) is None


def test_intent_head_learns_separable_intents_and_gives_probabilities():
    """The head on random data: unit-length points around one random centre per intent (uneven
    counts) are told apart on fresh points of the same intents, and its probabilities are a
    distribution over the labels it was fitted with."""
    from diffvoice.agent.paraphrase import IntentHead

    g = torch.Generator().manual_seed(3)
    centres = torch.nn.functional.normalize(torch.randn(5, 32, generator=g), dim=1)

    def sample(n_per):
        rows, labels = [], []
        for k, n in enumerate(n_per):
            rows.append(centres[k] + 0.15 * torch.randn(n, 32, generator=g))
            labels += [f"intent{k}"] * n
        return torch.nn.functional.normalize(torch.cat(rows), dim=1), labels

    x, y = sample([200, 20, 60, 5, 100])  # uneven, as templates render per intent
    head = IntentHead.fit(x, y)
    assert head.labels == tuple(f"intent{k}" for k in range(5))
    fresh, want = sample([20] * 5)
    got = [head.top(row) for row in fresh]
    assert sum(label == w for (label, _), w in zip(got, want, strict=True)) >= 95
    assert all(0.2 <= p <= 1.0 for _, p in got)
    logits = head.scale * (fresh @ head.weight) + head.bias
    assert torch.allclose(torch.softmax(logits, -1).sum(-1), torch.ones(100))
    # the rarest intent is not drowned by the commonest (every intent weighs alike)
    assert sum(label == "intent3" for label, _ in got[60:80]) >= 19


def test_intent_snapping_keeps_the_callers_service_and_day(snap):
    """A first message the head is sure of is heard as a training question of the head's intent
    stating exactly the message's services and days; the held-out template questions (never in
    the bank) that it swaps keep theirs, and their intent."""
    from diffvoice.agent.paraphrase import head_label

    snap._sig_ready.wait()
    assert snap._head is not None and snap.intent_threshold == 0.5
    by_text = {e.text: e for e in snap.entries}
    s = snap.snap("how much of my afternoon does a crown take")
    assert s.swapped and head_label(by_text[s.text]) == "duration" and "crown" in s.text
    s = snap.snap("is the place open on saturdays at all")
    assert head_label(by_text[s.text]) == "hours_day" and "saturday" in s.text
    # a service named in words no alias has: the question of the intent that names it
    s = snap.snap("price of getting my cavity fixed")
    assert head_label(by_text[s.text]) == "price" and snap.signature(s.text)[0] == {"fillings"}
    # a price question naming no service at all: one naming none (the answer asks which)
    assert by_text[snap.snap("price").text].intent == "follow:clarify"
    gen = DataGenerator(load_facts(MODEL / "facts.yaml"))
    swapped = 0
    for ex in gen.eval_set(seed=99, per_template=1):
        if ex.history or ex.kind not in ("fact", "small_talk"):
            continue
        out = snap.snap(ex.question)
        emb = snap.encoder.encode([ex.question])[0]
        label, p = snap._head.top(emb)
        if out.swapped and p >= snap.intent_threshold and out.text in by_text \
                and by_text[out.text].swap:
            swapped += 1
            said, heard = snap.signature(ex.question), snap.signature(out.text)
            assert heard[1] == said[1], ex.question  # the days, always
            # the services; or, none read, one the caller names in other words
            assert heard[0] == said[0] or (not said[0] and (snap._named_otherwise(
                ex.question, by_text[out.text]) or heard[0] == snap.sounds_like(ex.question))), \
                ex.question
            assert head_label(by_text[out.text]) == label
    assert swapped >= 20
    off = ParaphraseSnap(snap.entries, snap.embeddings, snap.encoder, intent_threshold=None,
                         signature=snap.signature)
    walk_in = "is it ok to roll up without booking"  # nearest below 0.7: the 1-NN rule keeps it
    assert not off.snap(walk_in).swapped and by_text[snap.snap(walk_in).text].intent == \
        "faq:walk_ins"


@pytest.mark.parametrize("heard, service", [
    # what Whisper wrote for training questions spoken by espeak voices (asr_train.jsonl)
    ("i wanted to ask quick question will feeling take long", "fillings"),
    ("okay, how long should plan for leaching?", "teeth whitening"),
    ("hi there, we're widening take more than an hour thanks so much", "teeth whitening"),
    ("what's the duration of feelings, thanks?", "fillings"),
    ("how much for a crowd", "crowns"),
])
def test_a_service_word_misheard_as_a_word_that_sounds_like_it(snap, heard, service):
    """A price / duration question whose service a recogniser wrote as a sound-alike word is
    asked as the training question of its intent naming that service."""
    from diffvoice.agent.paraphrase import head_label

    snap._sig_ready.wait()
    by_text = {e.text: e for e in snap.entries}
    assert snap.signature(heard)[0] == frozenset()  # no alias read
    assert snap.sounds_like(heard) == {service}
    out = snap.snap(heard)
    assert out.swapped and snap.signature(out.text)[0] == {service}
    assert head_label(by_text[out.text]) in ("price", "duration")


def test_sound_alikes_are_read_only_where_a_service_is_wanted(snap):
    snap._sig_ready.wait()
    # an alias word is read as itself, short words and function words never sound like one
    assert snap.sounds_like("how much is a filling") == set()
    assert snap.sounds_like("can i come in for a cleaning") == set()
    assert snap.sounds_like("what are your hours on friday") == set()
    # not a price or duration question: the sound-alike does not make it one
    by_text = {e.text: e for e in snap.entries}
    out = snap.snap("how are you feeling today")
    assert out.text not in by_text or snap.signature(out.text)[0] == frozenset()
    # a later turn: the previous exchange decides, not a sound-alike
    msgs = [{"role": "user", "content": "how much is a crown"},
            {"role": "assistant", "content": "A crown is 900 dollars."},
            {"role": "user", "content": "and how long does that take, i'm feeling nervous"}]
    rewritten = snap.rewrite(msgs)[-1]["content"]
    assert "filling" not in rewritten


def test_a_later_turn_stating_no_value_is_heard_as_the_training_follow_up(snap):
    """Later turns: a price or duration question naming no service becomes a training phrasing
    naming none (the model answers for the previous exchange's service, or asks which one); a
    booking intent after an answer about one service or one day becomes a training phrasing of
    "book that" (not the held-out one); another service or day than the previous answer's, the
    answer's question for it; anything else stating a value, or after other answers, stays."""
    from diffvoice.agent.dialogue_phrases import FOLLOW_BOOK

    def turn(prev_q, prev_a, text):
        return [{"role": "user", "content": prev_q}, {"role": "assistant", "content": prev_a},
                {"role": "user", "content": text}]

    price = ("how much is a cleaning", "A cleaning is 95 dollars.")
    hours = ("where are you", "We're at 214 Harbor Street in Port Ellis.")
    out = snap.rewrite(turn(*price, "duration"))[-1]["content"]
    orphans = {e.text for e in snap.entries if e.intent == "follow:clarify"}
    assert out in orphans and out != "duration"
    assert snap.rewrite(turn(*hours, "duration"))[-1]["content"] in orphans
    booked = snap.rewrite(turn(*price, "let's do it"))[-1]["content"]
    assert booked in FOLLOW_BOOK["train"] and booked not in FOLLOW_BOOK["heldout"]
    kept = turn(*hours, "let's do it")  # nothing to book from an address answer
    assert snap.rewrite(kept) is kept
    # another service (day) than the answer's: the answer's question for that value
    by_text = {e.text: e for e in snap.entries}
    other = snap.rewrite(turn(*price, "ok and crowns"))[-1]["content"]
    assert by_text[other].intent == "price" and snap.signature(other)[0] == {"crowns"}
    day = snap.rewrite(turn("are you open on tuesday", "On Tuesdays we're open from 8 am to 5 pm.",
                            "then saturday"))[-1]["content"]
    assert by_text[day].intent == "hours_day" and snap.signature(day)[1] == {"saturday"}
    for kept in (turn(*price, "can i book a crown"),  # a booking: as said
                 turn(*price, "what about a filling on friday"),  # a day too
                 turn(*hours, "and crowns")):  # after no answer about one service
        assert snap.rewrite(kept) is kept, kept[-1]
    off = ParaphraseSnap(snap.entries, snap.embeddings, snap.encoder, intent_threshold=None,
                         signature=snap.signature)
    assert off.follow_up(turn(*price, "duration")) is None


def test_the_encoder_loads_in_python_started_from_the_checkout_root():
    """`python -c` / `python -m diffvoice...` from the repository root puts the root first on
    sys.path, where our kernels/ folder would answer transformers' probe for Hugging Face's
    `kernels` package: the encoder still loads and encodes."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; assert sys.path[0] in ('', '.'), sys.path[0]\n"
            "from diffvoice.agent.paraphrase import Encoder\n"
            "print(tuple(Encoder().encode(['where are you']).shape))")
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=240)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("(1, 384)")
