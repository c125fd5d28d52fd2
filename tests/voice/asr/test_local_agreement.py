"""LocalAgreement-2 on synthetic hypothesis sequences, against whisper-streaming's rule
(confirm the longest common prefix of the last two hypotheses beyond what is confirmed)."""

from __future__ import annotations

import random

import pytest

from diffvoice.voice.asr.local_agreement import LocalAgreement, normalize_word


def _reference(hypotheses: list[list[str]]) -> list[list[str]]:
    """Confirmed words after each hypothesis, computed the plain way (n = 2)."""
    confirmed: list[str] = []
    previous: list[str] | None = None
    out = []
    for words in hypotheses:
        tail = words[len(confirmed) :]
        if previous is not None:
            k = 0
            while k < min(len(previous), len(tail)) and (
                normalize_word(previous[k]) == normalize_word(tail[k])
            ):
                k += 1
            confirmed += tail[:k]
            tail = tail[k:]
        previous = tail
        out.append(list(confirmed))
    return out


def test_growing_utterance_confirms_what_two_passes_agree_on():
    agreement = LocalAgreement(2)
    steps = [
        ("what", ""),
        ("what time", "what"),
        ("what time do you", "time"),
        ("What time do you open?", "do you"),
        ("what time do you open on saturday", "open"),
        ("What time do you open on Saturday?", "on Saturday?"),
    ]
    for hypothesis, newly in steps:
        assert agreement.insert(hypothesis) == newly, hypothesis
    assert agreement.confirmed == "what time do you open on Saturday?"
    assert agreement.unconfirmed == ""


def test_a_flickering_word_is_not_confirmed_until_two_passes_agree():
    agreement = LocalAgreement(2)
    agreement.insert("where are you")
    assert agreement.insert("where are you low") == "where are you"
    assert agreement.insert("where are you located") == ""  # "low" vs "located": no agreement
    assert agreement.text == "where are you located"
    assert agreement.insert("where are you located") == "located"


def test_confirmed_words_are_never_retracted():
    agreement = LocalAgreement(2)
    agreement.insert("book a cleaning")
    agreement.insert("book a cleaning")
    assert agreement.confirmed == "book a cleaning"
    agreement.insert("look at cleaning friday")  # a pass that rewrote confirmed words
    assert agreement.confirmed.startswith("book a cleaning")
    assert agreement.text == "book a cleaning friday"


def test_n3_needs_three_agreeing_passes():
    agreement = LocalAgreement(3)
    assert agreement.insert("a b") == ""
    assert agreement.insert("a b c") == ""
    assert agreement.insert("a b c") == "a b"
    assert agreement.insert("a b c d") == "c"
    with pytest.raises(ValueError, match="n must be"):
        LocalAgreement(1)


@pytest.mark.parametrize("seed", range(20))
def test_random_sequences_match_the_reference(seed):
    rng = random.Random(seed)
    vocab = ["a", "b", "c", "A", "b.", "d"]
    truth = [rng.choice(vocab) for _ in range(12)]
    hypotheses = []
    for k in range(1, 13):  # a growing prefix of the truth with random errors at the end
        words = truth[:k]
        if rng.random() < 0.5 and words:
            words = [*words[:-1], rng.choice(vocab)]
        hypotheses.append(words)
    agreement = LocalAgreement(2)
    confirmed_before: list[str] = []
    for words, expected in zip(hypotheses, _reference(hypotheses), strict=True):
        agreement.insert(" ".join(words))
        confirmed = agreement.confirmed.split()
        assert [normalize_word(w) for w in confirmed] == [normalize_word(w) for w in expected]
        assert confirmed[: len(confirmed_before)] == confirmed_before  # monotone
        confirmed_before = confirmed
