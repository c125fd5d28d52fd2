"""Word error rate of transcripts against the prompts' text: the project's one WER.

Contract: `normalise_words(text)` lower-cases, splits hyphenated words, drops punctuation
(apostrophes are kept inside words) and the fillers in FILLERS ("um", "uh", ...: a prompt's
hesitation is not a word the recogniser owes us); `edit_distance(ref, hyp)` is the Levenshtein
distance over word lists (substitutions, deletions, insertions cost 1);
`word_edits(reference, hypothesis)` is (edits, reference words) for one pair after normalising
both; `wer(pairs)` is the corpus WER, total edits / total reference words, over (reference,
hypothesis) pairs; a missing hypothesis counts as deleting the whole reference. Used by the voice
report's quality columns (quality.py), the load generator's per-voice WER (load.py) and the ASR
benchmark. Knows nothing about reports or audio.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

FILLERS = frozenset({"um", "umm", "uh", "uhh", "er", "erm", "hmm", "mm", "ah"})
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z0-9]+)*")


def normalise_words(text: str | None) -> list[str]:
    words = _WORD.findall((text or "").lower().replace("\u2019", "'").replace("-", " "))
    return [w for w in words if w not in FILLERS]


def edit_distance(ref: list[str], hyp: list[str]) -> int:
    previous = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        current = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1]


def word_edits(reference: str | None, hypothesis: str | None) -> tuple[int, int]:
    """(word edits, reference words) for one transcript."""
    ref = normalise_words(reference)
    return edit_distance(ref, normalise_words(hypothesis)), len(ref)


def wer(pairs: Iterable[tuple[str, str | None]]) -> float | None:
    """Total word edits / total reference words; None when there are no reference words."""
    edits = words = 0
    for reference, hypothesis in pairs:
        e, n = word_edits(reference, hypothesis)
        edits, words = edits + e, words + n
    return edits / words if words else None
