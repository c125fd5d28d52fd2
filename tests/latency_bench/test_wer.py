"""WER against hand-counted examples (and jiwer's definition: edits / reference words)."""

import pytest

from diffvoice.latency_bench.wer import edit_distance, normalise_words, wer


def test_normalise_drops_case_punctuation_and_fillers():
    assert normalise_words("What time, um, do you open on Saturday?") == [
        "what", "time", "do", "you", "open", "on", "saturday"]
    assert normalise_words("It's uh   OK") == ["it's", "ok"]
    assert normalise_words(None) == []


@pytest.mark.parametrize("ref, hyp, distance", [
    ("a b c", "a b c", 0),
    ("a b c", "a x c", 1),          # substitution
    ("a b c", "a c", 1),            # deletion
    ("a b c", "a b c d", 1),        # insertion
    ("a b c", "", 3),
    ("", "a b", 2),
    ("what time do you open", "what do you open on so i", 4),  # -time, +on +so +i
])
def test_edit_distance(ref, hyp, distance):
    assert edit_distance(ref.split(), hyp.split()) == distance


def test_corpus_wer_is_total_edits_over_total_words():
    pairs = [("what time do you open on saturday", "what do you open on so i"),  # 3 edits / 7
             ("where are you located", "where are you located"),              # 0 / 4
             ("how much is a cleaning", None)]                                # 5 / 5
    assert wer(pairs) == pytest.approx((3 + 0 + 5) / (7 + 4 + 5))
    assert wer([]) is None
