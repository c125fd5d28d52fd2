"""Slot constraints from the conversation: narrow a tool's schema by what was actually said.

    tools = contextualize(tools, messages)   # before build_plan; pure, returns new dicts
A property opts in with the schema keyword `"x-diffvoice-context"` (JSON schema ignores
unknown `x-` keywords, so the schema stays valid for any other client):
  "span"       a string property becomes an enum of the word spans (1..MAX_SPAN_WORDS words) of
               the conversation's user messages, as written and lower-cased, within the
               property's maxLength: the value is COPIED from the caller's words, chosen by the
               model's own scores (a Choice slot), never spelled token by token. For names,
               which a small model cannot spell from byte pieces it never saw in that order.
  "name_span"  "span" for a person's name: only runs of words that are no function word, right
               after a NAME_CUES word or in an answer to the assistant's question for a name;
               a tool whose REQUIRED name_span has none yet is left out (contextualize).
  "mentioned"  an enum (or a nullable enum) is narrowed to the values mentioned anywhere in the
               conversation (user, assistant and tool messages), when at least one is; values
               that look like "HH:MM" times also match the ways people say them ("10 am",
               "ten thirty", "half past 10", "noon", "8 30", a bare "10" as 10:00 or 22:00);
               other values match as whole words (a trailing "s" allowed: "fridays"), or by
               any of their ALIASES_KEY phrases ({"cleanings": ["teeth cleaning", ...]}; the
               longest phrase said wins: "kids checkup" is not also "checkup"). A null
               candidate is kept unless the caller just said a value (then a nullable type
               becomes non-nullable too). Nothing mentioned by the caller or a tool -> null
               when the property is nullable (an optional value nobody gave); a tool whose
               REQUIRED "mentioned" property neither mentioned yet is left out; else (a value
               only the assistant said, or none) the narrowing above, the full enum at worst.
A tool left out "waits" for the caller: with tool_choice "auto" the model answers (asks for
what is missing) — when every tool waits, no tool is offered at all — while a forced tool, or
every waiting tool when a call is required, stays (its name slot free text, its enum full).
The model still decides: which tool, which of the narrowed values, or to answer instead of
calling (tool_choice "auto"). The narrowing only removes values nobody said. Messages are
OpenAI-style dicts; string content only (other parts are ignored). Knows nothing about models.
"""

from __future__ import annotations

import collections
import copy
import functools
import re

from diffvoice.engine.constrained.layout import _pattern_times
from diffvoice.engine.constrained.limits import ALIASES_KEY, CONTEXT_KEY
from diffvoice.engine.constrained.reading import aliased, times_mentioned

KEY = CONTEXT_KEY
MAX_SPAN_WORDS = 3
MAX_USER_MESSAGES = 6      # the latest ones; spans of older messages are not offered
MAX_SPANS = 400
# value-by-message checks one request's narrowing may make (context_checks): 2,000 one-word
# values x 400 messages (800,000) took 0.7 s of this 2-core CPU, 2,000 two-word values 1.2 s;
# a receptionist's 1,440 possible times over a 100-message call is ~145,000
MAX_CONTEXT_CHECKS = 400_000
PHRASE_CHECKS = 10  # a several-word value: a regex search of each message, not a set lookup
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_ALL_TIMES = tuple(f"{h:02d}:{m:02d}" for h in range(24) for m in range(60))
# "name_span": a person's name is never one of these (English function words, fillers, number
# and time words, weekdays, polite words, the verbs of a booking request: "and i'm rosa sign me
# up" names rosa, not "rosa sign")
FUNCTION_WORDS = frozenset("""
a about actually after again all also am an and any anything anytime are around as at be because
been before book booking but by can cancel could day did do does doing don't for from get go
going good great guess had has have hello hey hi how i i'd i'll i'm i've if in is it it's its just
know let let's like look looking make maybe me mine my name name's need no not now o'clock of oh
ok okay on one or our please put really right say scrap see should so some someone something
sometime sounds sure thank thanks that that's the then there this time to today tomorrow two uh
um under up us want was we week what when which will with work works would yeah yes you your
morning afternoon evening noon midday half past quarter three four five six seven eight nine ten
eleven twelve thirty fifteen forty pm monday tuesday wednesday thursday friday saturday sunday
appointment visit slot coming next come came give take taking call called fine well here
thats theres might must may shall wanna gonna got free open available anytime instead again
sign schedule reschedule reserve squeeze fit set pencil hold
""".split())
# "name_span": a name is copied only from the words right after one of these ("put it under ivy
# hayes", "my name is sam", "and i'm rosa", "name's hugo", "it's for felix"), or from a message
# answering the assistant's question for a name; "i'd love to book" offers no name ("love")
NAME_CUES = frozenset("under is i'm im name's for".split())
# "i'm hoping to book", "i'm calling about": after "i'm" a word in -ing is a verb, not a name
# (a 4-letter "ming" or "king" is kept)
_VERB_AFTER_IM = re.compile(r"^[a-z']{3,}ing$")
_ASKS_NAME = re.compile(r"\bname\b", re.IGNORECASE)
# "won't", "we'll", "they're", "i've", "you'd", "i'm": never a name ("o'brien" is kept)
_CONTRACTION = re.compile(r"(n't|'ll|'re|'ve|'d|'m)$")
_WORD = re.compile(r"[a-z0-9']+(?:[.\-][a-z0-9']+)*")


def _texts(messages, roles) -> list[str]:
    out = []
    for m in messages or ():
        if isinstance(m, dict) and m.get("role") in roles and isinstance(m.get("content"), str):
            out.append(m["content"])
    return out


def _user_turns(messages) -> list[tuple[str, bool]]:
    """(text, asked) of each user message; `asked`: the assistant message right before it asked
    for a name."""
    out, asked = [], False
    for m in messages or ():
        if not isinstance(m, dict):
            continue
        role, content = m.get("role"), m.get("content")
        if role == "user" and isinstance(content, str):
            out.append((content, asked))
        asked = role == "assistant" and isinstance(content, str) \
            and bool(_ASKS_NAME.search(content))
    return out


def spans(messages, max_words: int = MAX_SPAN_WORDS, max_chars: int | None = None,
          skip: frozenset | None = None, cued: bool = False) -> list[str]:
    """Word spans of the latest user messages, newest message first, as written + lower case.
    With `skip` (lower-case words): only the maximal runs of words outside `skip` (a longer
    run: its windows of `max_words`), and no word holding a digit. With `cued` too: only runs
    right after a NAME_CUES word ("under", "is", "i'm", "name's", "for"), or any run of a
    message that answers the assistant's question for a name."""
    out: dict[str, None] = {}
    for text, asked in reversed(_user_turns(messages)[-MAX_USER_MESSAGES:]):
        words = [w.strip(".,!?;:\"()") for w in text.split()]
        words = [w for w in words if w and '"' not in w and "\\" not in w]
        if skip is None:
            found = [words[i: i + n] for n in range(1, max_words + 1)
                     for i in range(len(words) - n + 1)]
        else:
            found, run, before = [], [], None
            for i, w in enumerate(words + [None]):
                if w is not None and w.lower() not in skip and w.lower().rstrip("s") not in skip \
                        and not any(c.isdigit() for c in w) and not _CONTRACTION.search(w.lower()):
                    if not run:
                        before = words[i - 1].lower() if i else None
                    run.append(w)
                    continue
                if run and cued and before in ("i'm", "im") and not asked \
                        and _VERB_AFTER_IM.match(run[0].lower()):
                    run = []
                    continue
                if run and (not cued or asked or before in NAME_CUES):
                    n = min(len(run), max_words)
                    found += [run[i: i + n] for i in range(len(run) - n + 1)]
                run = []
        for ws in found:
            span = " ".join(ws)
            for s in (span, span.lower()):
                if max_chars is None or len(s) <= max_chars:
                    out.setdefault(s, None)
    return list(out)[:MAX_SPANS]


def mentioned(values: list, messages, aliases: dict | None = None) -> list:
    """Values the conversation points at, newest first:
    1. a caller message that mentions any value, when no tool result mentioning one came after
       it: its values (a null candidate kept, except when that message is the caller's latest:
       a caller who just said a time wants that time checked);
    2. else a tool result that mentions any (its values came after the caller spoke): those of
       its values the caller mentioned before it, when any (the caller asked for 14:30 and the
       result lists it among the free times), else all of its values;
    3. else the newest assistant message that mentions any (the model's own earlier output,
       which may have restated a value wrongly: last);
    4. else all of `values`.
    `aliases` ({value: [phrases]}): other ways a value is said, as in ALIASES_KEY."""
    msgs = [(m.get("role"), m["content"]) for m in messages or ()
            if isinstance(m, dict) and isinstance(m.get("content"), str)]
    nulls = [v for v in values if v is None]
    users = [i for i, (role, _) in enumerate(msgs) if role == "user"]
    latest_user = users[-1] if users else None
    for i in reversed(range(len(msgs))):
        role, text = msgs[i]
        if role not in ("user", "tool"):
            continue
        keep = _mentioned_in(values, text, aliases)
        if not keep:
            continue
        if role == "user":
            return keep + ([] if i == latest_user else nulls)
        for j in reversed(users):
            if j < i:
                chosen = _mentioned_in(keep, msgs[j][1], aliases)
                if chosen:
                    return chosen + nulls
        return keep + nulls
    for role, text in reversed(msgs):
        if role == "assistant":
            keep = _mentioned_in(values, text, aliases)
            if keep:
                return keep + nulls
    return values


def said_any(values: list, messages, aliases: dict | None = None) -> bool:
    """Whether a caller (`user`) or `tool` message mentions one of `values` (as `mentioned`
    reads them). The assistant's own words do not count: "On Fridays we're open from 8 am to
    3 pm" gives no booking time."""
    return any(_mentioned_in(values, m["content"], aliases) for m in messages or ()
               if isinstance(m, dict) and m.get("role") in ("user", "tool")
               and isinstance(m.get("content"), str))


def values_in(values: list, text: str, aliases: dict | None = None) -> list:
    """The values of `values` one text mentions (as `mentioned` reads a message)."""
    return _mentioned_in(values, text, aliases)


def _mentioned_in(values: list, text: str, aliases: dict | None = None) -> list:
    blob = text.lower()
    words = set(_WORD.findall(blob))
    times = times_mentioned(blob) if any(isinstance(v, str) and _HHMM.match(v)
                                         for v in values) else set()
    by_alias = aliased(values, blob, aliases) if aliases else set()
    keep = []
    for v in values:
        if not isinstance(v, str):
            continue
        if v in by_alias:
            keep.append(v)
        elif _HHMM.match(v):
            if v in times:
                keep.append(v)
        elif v.lower() in words or v.lower() + "s" in words or v.lower() + "'s" in words or (
                " " in v and _phrase(v.lower()).search(blob)):
            keep.append(v)
    return keep


@functools.lru_cache(maxsize=4096)  # a request's enum values, compiled once, not per message
def _phrase(value: str) -> re.Pattern:
    return re.compile(rf"\b{re.escape(value)}\b")


def _words_of(p) -> frozenset:
    """Lower-case words of one property's enum values and ALIASES_KEY phrases."""
    if not isinstance(p, dict):
        return frozenset()
    phrases = [v for v in p.get("enum") or [] if isinstance(v, str)]
    aliases = p.get(ALIASES_KEY)
    if isinstance(aliases, dict):
        phrases += [a for v in aliases.values() if isinstance(v, list) for a in v
                    if isinstance(a, str)]
    return frozenset(w for v in phrases for x in _WORD.findall(v.lower())
                     for w in (x, x.rstrip("s")))


class _OtherWords:
    """The words of every property's values but one's own, tested without building the set:
    never part of a name ("a dental crown" names no one "dental"). `skip` words count too."""

    def __init__(self, counts: dict, own: frozenset, skip: frozenset = frozenset()) -> None:
        self._counts, self._own, self._skip = counts, own, skip

    def __contains__(self, word) -> bool:
        return word in self._skip or self._counts.get(word, 0) - (word in self._own) > 0


def context_checks(tools, messages) -> int:
    """The value-by-message checks narrowing `tools` by `messages` makes (counted before any is
    made): every opted-in property's candidates against every message with text; a value of
    several words is a phrase search, counted as PHRASE_CHECKS."""
    texts = sum(1 for m in messages or () if isinstance(m, dict)
                and isinstance(m.get("content"), str))
    checks = 0
    for t in tools or ():
        props = (((t.get("function") or {}).get("parameters") or {}).get("properties") or {}) \
            if isinstance(t, dict) else {}
        for p in props.values() if isinstance(props, dict) else ():
            if isinstance(p, dict) and KEY in p:
                enum = p.get("enum") if isinstance(p.get("enum"), list) else (
                    _ALL_TIMES if isinstance(p.get("pattern"), str) else ())  # spans: 1 a text
                values = sum(PHRASE_CHECKS if isinstance(v, str) and " " in v else 1
                             for v in enum)
                checks += (values + 1) * (texts + 1)
    return checks


def _candidates(schema: dict) -> list:
    """The values a "mentioned" property narrows: its enum, or the times its pattern allows
    (and null when its type is nullable)."""
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    if isinstance(schema.get("pattern"), str):
        # the client's pattern runs in RE2 (linear time, no lookaround), as the layout compiler
        # runs it: Python's re backtracked for seconds on "(\d?\d?\d?\d?\d?:?){6}y"
        times = _pattern_times(schema["pattern"], KEY)
        types = schema.get("type")
        return times + ([None] if isinstance(types, list) and "null" in types else [])
    raise ValueError(f"{KEY} 'mentioned' needs an enum or a time pattern")


def _unsaid(schema: dict, messages) -> bool:
    """A "mentioned" property none of whose values anybody said yet."""
    return schema.get(KEY) == "mentioned" and not said_any(
        [v for v in _candidates(schema) if v is not None], messages, schema.get(ALIASES_KEY))


def _narrow(schema: dict, messages, name_skip=FUNCTION_WORDS) -> dict:
    mode = schema.get(KEY)
    if mode is None:
        return schema
    out = {k: v for k, v in schema.items() if k not in (KEY, ALIASES_KEY)}
    if mode in ("span", "name_span"):
        skip = name_skip if mode == "name_span" else None
        candidates = spans(messages, max_chars=schema.get("maxLength"), skip=skip,
                           cued=mode == "name_span")
        if mode == "name_span" and not candidates:
            out["enum"] = []  # no name said yet: contextualize drops a tool that needs one
            return out
        if candidates:  # no user words at all: leave the free-text slot as it was
            out.pop("maxLength", None)
            out.pop("minLength", None)
            out["enum"] = candidates
        return out
    if mode == "mentioned":
        values = _candidates(schema)
        if None in values and _unsaid(schema, messages):
            # an optional value nobody said is "none given" (null), not the model's guess
            out.pop("pattern", None)
            out["enum"] = [None]
            return out
        said = mentioned(values, messages, schema.get(ALIASES_KEY))
        if isinstance(schema.get("enum"), list) or len(said) < len(values):
            out.pop("pattern", None)
            out["enum"] = said
            types = schema.get("type")
            if isinstance(types, list) and "null" in types and None not in said:
                # the caller just said a value: null is no candidate, and a nullable type
                # would add it back (engine/constrained/layout.py)
                base = [t for t in types if t != "null"]
                out["type"] = base[0] if len(base) == 1 else base
        return out
    raise ValueError(f"{KEY} must be 'span', 'name_span' or 'mentioned', got {mode!r}")


def uses_context(tools) -> bool:
    return any(KEY in p for t in tools or () if isinstance(t, dict)
               for p in (((t.get("function") or {}).get("parameters") or {})
                         .get("properties") or {}).values() if isinstance(p, dict))


def contextualize(tools, messages, keep: str | None = None, must_call: bool = False) -> list:
    """`tools` with every opted-in property narrowed by `messages` (a new list; input intact).
    A tool waits (is left out) while a REQUIRED "name_span" property has no name in the
    conversation yet (the model asks for the name instead of copying some other word) or a
    REQUIRED "mentioned" property has no value anybody said (the model asks for it instead of
    guessing one), unless it is `keep` (the tool tool_choice forces). When every tool waits:
    [] (answer instead), or, with `must_call` (tool_choice "required"), the waiting tools, their
    name slots free text."""
    if not uses_context(tools) or isinstance(messages, str):
        return list(tools or ())
    checks = context_checks(tools, messages)
    if checks > MAX_CONTEXT_CHECKS:
        raise ValueError(f"{KEY}: narrowing these tools by this conversation takes {checks} "
                         f"value-by-message checks (limit {MAX_CONTEXT_CHECKS}): send fewer "
                         "messages or fewer enum values on context properties")
    out, waiting = [], []
    every = [p for t in tools if isinstance(t, dict) for p in (
        ((t.get("function") or {}).get("parameters") or {}).get("properties") or {}).values()]
    own = {id(p): _words_of(p) for p in every}
    counts = collections.Counter(w for words in own.values() for w in words)
    for tool in tools:
        fn = (tool.get("function") or {}) if isinstance(tool, dict) else {}
        props = (fn.get("parameters") or {}).get("properties")
        if not isinstance(props, dict):
            out.append(tool)
            continue
        new = copy.deepcopy(tool)
        # a name is none of the words of any value of any tool's other properties
        narrowed = {k: _narrow(p, messages, _OtherWords(counts, own.get(id(p), frozenset()),
                                                        FUNCTION_WORDS))
                    if isinstance(p, dict) else p for k, p in props.items()}
        unnamed = [k for k, p in narrowed.items() if isinstance(p, dict) and p.get("enum") == []]
        for k in unnamed:  # as a free-text slot, for when the tool is kept after all
            narrowed[k] = {j: v for j, v in props[k].items() if j != KEY}
        new["function"]["parameters"]["properties"] = narrowed
        required = set((fn.get("parameters") or {}).get("required") or ())
        unsaid = [k for k in required if isinstance(props.get(k), dict)
                  and _unsaid(props[k], messages)]
        if (required.intersection(unnamed) or unsaid) and fn.get("name") != keep:
            waiting.append(new)
            continue
        out.append(new)
    return out or (waiting if must_call else [])
