"""LocalAgreement-n: the stable prefix of a growing transcript (whisper-streaming's policy,
Macháček et al. 2023), for re-transcription passes over one utterance.

    agreement = LocalAgreement(n=2)
    agreement.insert("what time do")        # -> ""            (nothing confirmed yet)
    agreement.insert("what time do you")    # -> "what time do"  (newly confirmed words)
    agreement.confirmed                     # "what time do"

A word is confirmed once the last `n` hypotheses agree on it and on every word before it.
Confirmed words are never retracted: a later hypothesis that disagrees with them only confirms
more once its continuation agrees again. Words are compared case- and punctuation-insensitively
("Saturday?" == "saturday"); the confirmed text keeps the spelling of the newest hypothesis.
Pure Python; knows nothing about audio or models.
"""

from __future__ import annotations

from collections import deque

_STRIP = ".,!?;:\"'()[]-"


def normalize_word(word: str) -> str:
    return word.strip(_STRIP).lower()


class LocalAgreement:
    def __init__(self, n: int = 2) -> None:
        if n < 2:
            raise ValueError(f"n must be >= 2 (agreement needs two hypotheses), got {n}")
        self.n = n
        self._confirmed: list[str] = []
        self._tails: deque[list[str]] = deque(maxlen=n - 1)  # earlier hypotheses, unconfirmed
        self._latest_tail: list[str] = []

    @property
    def confirmed(self) -> str:
        return " ".join(self._confirmed)

    @property
    def unconfirmed(self) -> str:
        """The newest hypothesis' words after the confirmed prefix."""
        return " ".join(self._latest_tail)

    @property
    def text(self) -> str:
        """Confirmed prefix + the newest hypothesis' tail (the best current transcript)."""
        return " ".join([*self._confirmed, *self._latest_tail])

    def _tail(self, words: list[str]) -> list[str]:
        k = len(self._confirmed)
        head = [normalize_word(w) for w in words[:k]]
        if head == [normalize_word(w) for w in self._confirmed]:
            return words[k:]
        # The hypothesis rewrote confirmed words: align by position (confirmed text stays).
        return words[k:]

    def insert(self, hypothesis: str) -> str:
        """Feed the newest full hypothesis; returns the newly confirmed words (may be "")."""
        tail = self._tail(hypothesis.split())
        self._latest_tail = tail
        if len(self._tails) < self.n - 1:
            self._tails.append(tail)
            return ""
        agreed = 0
        for i, word in enumerate(tail):
            key = normalize_word(word)
            if all(i < len(t) and normalize_word(t[i]) == key for t in self._tails):
                agreed += 1
            else:
                break
        newly = tail[:agreed]
        self._confirmed.extend(newly)
        self._latest_tail = tail[agreed:]
        self._tails.append(tail)
        for j, t in enumerate(self._tails):  # drop the now-confirmed words from the history
            self._tails[j] = t[agreed:]
        return " ".join(newly)

    def reset(self) -> None:
        self._confirmed = []
        self._tails.clear()
        self._latest_tail = []
