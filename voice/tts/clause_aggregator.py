"""Clause-level text aggregation for TTS: speak the first clause as soon as it is complete.

pipecat's default aggregator waits for a whole sentence (and for a character after its final
punctuation). A diffusion LLM commits text a block at a time, so that wait is often a whole extra
block. This aggregator cuts after `,;:.!?` (and their full-width / dash cousins) when the next
character is whitespace *or the punctuation ends the incoming chunk* (the engine only emits whole
words, so a chunk never ends inside "3.50"), and after `max_chars` at the last space (or hard, for
text without spaces) when there is no punctuation.

Contract: `ClauseTextAggregator().aggregate(text)` yields `Aggregation(clause, TextType.SENTENCE)`
for every complete clause, stripped; `flush()` returns the rest. Knows nothing about audio.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from pipecat.utils.text.base_text_aggregator import Aggregation, BaseTextAggregator, TextType

CLAUSE_PUNCTUATION = frozenset(",;:.!?…—–。，！？；：")


def split_clauses(buffer: str, *, chunk_end: bool, max_chars: int) -> tuple[list[str], str]:
    """Cut complete clauses off the front of `buffer`; return (clauses, remainder).

    chunk_end: the buffer's last character is the end of an incoming chunk (treated like a
    following space for punctuation).
    """
    clauses: list[str] = []
    start = 0
    last_space = -1
    n = len(buffer)
    for i, ch in enumerate(buffer):
        if ch.isspace():
            last_space = i
        if ch in CLAUSE_PUNCTUATION:
            nxt_is_space = i + 1 < n and buffer[i + 1].isspace()
            at_end = i + 1 == n and chunk_end
            if nxt_is_space or at_end:
                piece = buffer[start : i + 1].strip()
                if piece and any(c.isalnum() for c in piece):
                    clauses.append(piece)
                    start = i + 1
                    last_space = -1
                continue
        if i - start + 1 > max_chars:
            # no punctuation for max_chars: cut at the last space, or hard-cut text without
            # spaces (e.g. Chinese, Japanese)
            cut = last_space if last_space > start else i + 1
            piece = buffer[start:cut].strip()
            if piece:
                clauses.append(piece)
            start = cut + 1 if cut == last_space else cut
            last_space = -1
    return clauses, buffer[start:]


class ClauseTextAggregator(BaseTextAggregator):
    def __init__(self, *, max_chars: int = 80, **kwargs) -> None:
        super().__init__(aggregation_type=TextType.SENTENCE, **kwargs)
        if max_chars < 8:
            raise ValueError(f"max_chars must be >= 8, got {max_chars}")
        self._max_chars = max_chars
        self._text = ""

    @property
    def text(self) -> Aggregation:
        return Aggregation(text=self._text.strip(), type=TextType.SENTENCE)

    async def aggregate(self, text: str) -> AsyncIterator[Aggregation]:
        self._text += text
        clauses, self._text = split_clauses(self._text, chunk_end=True, max_chars=self._max_chars)
        for clause in clauses:
            yield Aggregation(text=clause, type=TextType.SENTENCE)

    async def flush(self) -> Aggregation | None:
        rest, self._text = self._text.strip(), ""
        return Aggregation(text=rest, type=TextType.SENTENCE) if rest else None

    async def handle_interruption(self) -> None:
        self._text = ""

    async def reset(self) -> None:
        self._text = ""
