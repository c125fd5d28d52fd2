"""Say back only what was said: times and days in a booking-flow reply must come from the call.

    text, how = ground(reply, messages)   # how: None | "substituted" | "replaced" | "ungrounded"
A small model restating the caller's values gets them wrong in a way no well-formed check can
see: "And what name should I put a kids checkup on Thursday at 1:30 pm under?" after the caller
said 3:30 is a perfectly shaped reply. On the receptionist's held-out dialogues such restatement
errors were 19 of 60 failures (eval.json v3). The rule, applied to the reply text after decoding:

  * values: the times ("3:30 pm", "12 pm": the flows' `spoken_time` form) and weekday names the
    reply states; other text is left alone;
  * after a tool result (the last message is a `tool` message answering an assistant call): the
    stated values must be in that call's arguments or its result; when one is not, the reply is
    replaced by `result_reply(name, args, result)` (the sentence the flows train for that call
    and result) when the caller passes one, else reported "ungrounded";
  * otherwise: the stated values must be mentioned somewhere in the conversation (any message,
    calls' arguments included; times in any way engine.constrained.context.times_mentioned
    reads them). For each kind (time, day) whose ONE stated value is not: the candidates are the
    values the conversation points at by the same rule tool arguments are narrowed with
    (context.mentioned: the caller's newest mention first; of a time said without am/pm, the
    reading between 07:00 and 19:59); exactly one candidate -> it is written in place
    ("substituted"); otherwise a question is replaced by `next_question(messages)` (the
    slot-filling question for the slots the call holds, "Sure, what would you like to come in
    for on Wednesday?" for "... on Wednesday at 12 pm?" when nobody said 12) when the caller
    passes one and it gives one ("replaced"), else the reply is left, reported "ungrounded".
Only replies `applies(text)` accepts are checked (the receptionist passes its flow-reply test:
fact-sheet answers state opening hours nobody said, and must not be touched). Pure text; knows
nothing about models. The property it must keep: every reply the training flows write for a
conversation is returned unchanged (tests/agent/test_grounding.py checks thousands).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from diffvoice.agent.facts import DAYS
from diffvoice.agent.tool_schemas import spoken_time
from diffvoice.engine.constrained.context import mentioned, times_mentioned
from diffvoice.engine.constrained.layout import ALL_TIMES

_TIME = re.compile(r"\b(1[0-2]|[1-9])(?::([0-5]\d))? (am|pm)\b", re.IGNORECASE)
_DAY = re.compile(r"\b(" + "|".join(DAYS) + r")\b", re.IGNORECASE)


def stated_times(text: str) -> list[tuple[str, re.Match]]:
    out = []
    for m in _TIME.finditer(text):
        hour = int(m.group(1)) % 12 + (12 if m.group(3).lower() == "pm" else 0)
        out.append((f"{hour:02d}:{int(m.group(2) or 0):02d}", m))
    return out


def stated_days(text: str) -> list[tuple[str, re.Match]]:
    return [(m.group(1).lower(), m) for m in _DAY.finditer(text)]


def _texts(messages: list[dict]) -> list[str]:
    """Every message's text, tool-call arguments included."""
    out = []
    for m in messages:
        if isinstance(m.get("content"), str):
            out.append(m["content"])
        for call in m.get("tool_calls") or ():
            args = (call.get("function") or {}).get("arguments")
            out.append(args if isinstance(args, str) else json.dumps(args))
    return out


def _values_in(texts: list[str]) -> tuple[set[str], set[str]]:
    times, days = set(), set()
    for text in texts:
        times |= times_mentioned(text)
        days |= {w for w in re.findall(r"[a-z]+", text.lower()) if w in DAYS} | {
            w[:-1] for w in re.findall(r"[a-z]+", text.lower()) if w[:-1] in DAYS}
    return times, days


def last_call(messages: list[dict]) -> tuple[str, dict, dict] | None:
    """(name, args, result) when the last message is a tool result answering an assistant call."""
    if not messages or messages[-1].get("role") != "tool":
        return None
    call = next((m for m in reversed(messages[:-1]) if m.get("role") == "assistant"
                 and m.get("tool_calls")), None)
    try:
        function = call["tool_calls"][-1]["function"]
        args = function.get("arguments")
        args = json.loads(args) if isinstance(args, str) else args
        content = messages[-1].get("content")
        result = json.loads(content) if isinstance(content, str) else content
    except (TypeError, KeyError, IndexError, ValueError):
        return None
    if not isinstance(args, dict) or not isinstance(result, dict):
        return None
    return function.get("name"), args, result


def daytime_reading(pair: list[str]) -> list[str]:
    """The two readings of a time said without am/pm ("half past twelve": 00:30, 12:30): the
    one between 07:00 and 19:59 when exactly one is, as a caller to a business means it."""
    a, b = sorted(pair)
    if a[2:] != b[2:] or int(b[:2]) - int(a[:2]) != 12:
        return pair
    day = [t for t in (a, b) if "07:00" <= t <= "19:59"]
    return day if len(day) == 1 else pair


def ground(text: str, messages: list[dict] | None,
           applies: Callable[[str], bool] | None = None,
           result_reply: Callable[[str, dict, dict], str | None] | None = None,
           next_question: Callable[[list[dict]], str | None] | None = None
           ) -> tuple[str, str | None]:
    """(reply, how): see the module docstring."""
    if not messages or not text or text.lstrip().startswith("<tool_call>"):
        return text, None
    if applies is not None and not applies(text.strip()):
        return text, None
    times, days = stated_times(text), stated_days(text)
    if not times and not days:
        return text, None
    last = last_call(messages)
    if last is not None:
        name, args, result = last
        ok_times, ok_days = _values_in([json.dumps(args), json.dumps(result)])
        if all(t in ok_times for t, _ in times) and all(d in ok_days for d, _ in days):
            return text, None
        reply = result_reply(name, args, result) if result_reply else None
        return (reply, "replaced") if reply else (text, "ungrounded")
    ok_times, ok_days = _values_in(_texts(messages))
    edits, ungrounded = [], False
    for stated, ok, values, render in (
            (times, ok_times, ALL_TIMES, spoken_time),
            (days, ok_days, list(DAYS), str.capitalize)):
        bad = [(v, m) for v, m in stated if v not in ok]
        if not bad:
            continue
        candidates = [v for v in mentioned(values, messages) if v is not None]
        if len(candidates) == 2 and values is ALL_TIMES:
            candidates = daytime_reading(candidates)
        if len(stated) != 1 or len(candidates) != 1 or len(candidates) == len(values):
            ungrounded = True
            continue
        _, m = bad[0]
        new = render(candidates[0])
        if m.group(0)[:1].islower() and new[:1].isupper() and render is str.capitalize:
            new = new.lower()
        edits.append((m.start(), m.end(), new))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    if ungrounded:
        question = next_question(messages) if next_question is not None \
            and text.rstrip().endswith("?") else None
        if question:  # a slot question stating a value nobody said: ask for what is missing
            return question, "replaced"
        return text, "ungrounded"
    return text, "substituted" if edits else None
