"""How well a spoken question set was heard, and its answers split by it (`diffvoice eval-model`'s
`hearing` key of each spoken set; agent/train/evaluate.py).

    heard_words(text) -> the words compared (latency_bench.wer's normalising, unheard spelling off)
    hearing(replies, said) -> WER, share heard word for word, accuracy on those and the rest

A reply is anything with `template` ("spoken:ID:VOICE:ASR"), `question` (the transcript) and
`correct`, as evaluate.Reply. Knows nothing about engines or models.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from diffvoice.latency_bench.wer import edit_distance, normalise_words

_SPELLING = ((re.compile(r"\b([ap]) m\b"), r"\1m"), (re.compile(r"\bok\b"), "okay"))


def heard_words(text: str) -> list[str]:
    """The words of a question for comparing what was said with what a recogniser wrote:
    latency_bench.wer's normalising, then spelling that a listener cannot hear dropped —
    apostrophes ("whats" / "What's"), "a.m." as am, "ok" as okay."""
    text = " ".join(w.replace("'", "") for w in normalise_words(text))
    for pattern, repl in _SPELLING:
        text = pattern.sub(repl, text)
    return text.split()


def hearing(replies: Sequence[Any], said: dict[int, str] | None = None) -> dict:
    """How well a spoken set was heard, and the answers split by it: the transcripts' corpus WER
    against the words said (the edit distance of latency_bench.wer over `heard_words`), the share
    heard word for word (the same letters and digits: "e-mail" / "email", "2 pm" / "2pm" count as
    heard), accuracy on those rows and on the misheard ones, overall and per voice. It separates
    understanding (a question heard right and still answered wrong) from hearing. Rows are matched
    to what was said by their template, "spoken:ID:VOICE:ASR"; `said` maps an independent item id
    to its question (default: the shipped set)."""
    if said is None:
        from diffvoice.agent.train.independent import load_independent

        said = {item["id"]: item["q"] for item in load_independent()}
    groups: dict[str, list[tuple[int, int, bool, bool]]] = {}
    for r in replies:
        _, item_id, voice, _ = r.template.split(":", 3)
        ref, hyp = heard_words(said[int(item_id)]), heard_words(r.question)
        row = (edit_distance(ref, hyp), len(ref), "".join(ref) == "".join(hyp), r.correct)
        for key in ("all", voice):
            groups.setdefault(key, []).append(row)

    def split(rows: list[tuple[int, int, bool, bool]]) -> dict:
        exact = [ok for _, _, same, ok in rows if same]
        off = [ok for _, _, same, ok in rows if not same]
        words = sum(w for _, w, _, _ in rows)
        return {"n": len(rows), "wer": sum(e for e, *_ in rows) / words if words else None,
                "heard_exactly_rate": len(exact) / len(rows),
                "accuracy_heard_exactly": sum(exact) / len(exact) if exact else None,
                "accuracy_misheard": sum(off) / len(off) if off else None}

    out = split(groups.pop("all")) if replies else {"n": 0}
    out["per_voice"] = {voice: split(rows) for voice, rows in sorted(groups.items())}
    return out
