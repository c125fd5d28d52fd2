"""Reading booking slot values out of a caller's words, the way the tools' arguments are read.

    signature = slot_signature(facts)   # text -> (services, days, times, names), frozensets
    answer = slot_answer_reader(facts)  # messages -> a slot answer reduced to its value, or None
    without_name(text, name)            # text without the clause that gives the name
Used by paraphrase snapping (agent/paraphrase.py) to compare a caller's opener with
training openers value for value, and to hear a bare slot answer as the training answers say it.
Values are read by engine.constrained.context (aliases longest first, times however people say
them, a name only after a cue), so a snapped message and the tools agree on what was said.
Pure text; knows nothing about models.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from diffvoice.agent.facts import DAYS, service_aliases


def slot_signature(facts) -> Callable[[str], tuple]:
    """text -> the booking slot values it states: (services, days, times on the book's grid,
    caller names), each a frozenset, read as the tools' arguments are
    (engine.constrained.context: services by fact-sheet alias, longest first; times however
    people say them; a name only after a cue)."""
    from diffvoice.agent.booking_schemas import grid_times
    from diffvoice.engine.constrained.context import (
        FUNCTION_WORDS,
        spans,
        times_mentioned,
        values_in,
    )

    aliases = service_aliases(facts)
    grid = frozenset(grid_times(facts))  # "8 30" is 08:30 or 20:30: the book has only 08:30
    services = list(aliases)
    skip = FUNCTION_WORDS | frozenset(w for a in aliases.values() for x in a for w in x.split())
    skip |= frozenset(facts.name.lower().split())

    def signature(text: str) -> tuple:
        low = text.lower()
        names = spans([{"role": "user", "content": low}], skip=skip, cued=True)
        return (frozenset(values_in(services, low, aliases)), frozenset(values_in(DAYS, low)),
                frozenset(times_mentioned(low) & grid), frozenset(names))

    return signature


_ASKS = (("name", ("what name", "name should i", "name is the")),
         ("time", ("what time", "which would you like")),
         ("day", ("what day", "other day", "which day")),
         ("service", ("come in for", "which service")))


_QUESTION_WORDS = frozenset("how what what's whats when where which who why is are do does can "
                            "could will would should may".split())


def slot_answer_reader(facts) -> Callable[[list[dict]], str | None]:
    """messages -> the caller's answer reduced to the value it gives, or None. Applies when the
    assistant's last message asked for one slot (name, time, day or service) and the caller's
    reply gives exactly one value of that slot, no value of another, and no other word than
    English function words, fillers and the value's own ("you can put hugo hayes" -> "hugo
    hayes", "let's do friday" -> "friday", "two pm works for me" -> "2 pm"): the model hears
    the answer in the form its training answers take, and nothing the caller said is lost."""
    from diffvoice.agent.tool_schemas import spoken_time
    from diffvoice.engine.constrained.context import _WORD, FUNCTION_WORDS, spans

    signature = slot_signature(facts)
    spoken = {sv.name: sv.spoken.lower() for sv in facts.services}
    alias_words = frozenset(w for a in service_aliases(facts).values() for x in a
                            for w in _WORD.findall(x))

    def answer(messages: list[dict]) -> str | None:
        if len(messages) < 2 or messages[-2].get("role") != "assistant":
            return None
        asked_text = messages[-2].get("content")
        text = messages[-1].get("content")
        if not isinstance(asked_text, str) or not isinstance(text, str) \
                or not asked_text.strip().endswith("?"):
            return None
        low_q = asked_text.lower()
        asked = next((k for k, cues in _ASKS if any(c in low_q for c in cues)), None)
        if asked is None:
            return None
        low = " ".join(text.lower().replace("p.m.", "pm").replace("a.m.", "am").split())
        services, days, times, _ = signature(low)
        words = _WORD.findall(low)
        if asked == "name" and (not words or words[0] in _QUESTION_WORDS or "?" in low):
            return None  # "how much is it": a question, not a name ("much")
        names = spans([{"role": "assistant", "content": asked_text},
                       {"role": "user", "content": low}], skip=FUNCTION_WORDS | alias_words,
                      cued=True) if asked == "name" else []
        found = {"service": services, "day": days, "time": times, "name": frozenset(names)}
        if len(found[asked]) != 1 or any(v for k, v in found.items() if k != asked):
            return None
        (value,) = found[asked]
        own = set(_WORD.findall(value)) if asked == "name" else \
            alias_words if asked == "service" else {value}
        rest = [w for w in words if w not in FUNCTION_WORDS and w not in own
                and w.rstrip("s") not in FUNCTION_WORDS and not any(c.isdigit() for c in w)]
        if rest:
            return None
        if asked == "service":
            return spoken[value]
        if asked == "time":
            return spoken_time(value)
        return value

    return answer


def without_name(text: str, name: str) -> str:
    """`text` without the clause giving `name` ("... and i'm ivy hayes", "put it under rosa")."""
    cue = r"(?:under|is|i'm|im|name's|for)"
    glue = r"(?:\b(?:and|so|put|it|it's|my|name|the|this)\s+)*"
    out = re.sub(rf"{glue}\b{cue}\s+{re.escape(name)}\b", " ", text, count=1)
    return " ".join(out.split())


__all__ = ["slot_answer_reader", "slot_signature", "without_name"]
