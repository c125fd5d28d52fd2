"""How a text's words name values: spoken and written times, and enum values by their alias
phrases, as callers say them and recognisers write them down.

    times_mentioned(text) -> {"HH:MM", ...}    every time a text may be saying
    aliased(values, text, aliases) -> {value}  values named by one of their alias phrases
Used by the conversation narrowing (engine/constrained/context.py, which re-exports both), the
receptionist's slot reading and grounding. Knows nothing about schemas or models.
"""

from __future__ import annotations

import functools
import re

_NUM = {w: i for i, w in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve".split())}
_MIN = {"forty five": 45, "forty-five": 45, "fifteen": 15, "thirty": 30}


# "at 1030", "930 am", "1130pm": a time written without its colon, as recognisers write it;
# read only after a word that introduces a time or before am / pm, and (without am / pm) only
# on the quarter hours, so "room 1030" and "at 2024" stay numbers
_CLOCK_DIGITS = re.compile(
    r"\b(?:(?P<cue>at|around|about|by|say|until|till|from) )?(?P<h>\d{1,2})(?P<m>\d{2})"
    r"(?: ?(?P<ampm>am|pm))?\b")


def _clock_digits(m: re.Match) -> str:
    hour, minute, ampm = int(m.group("h")), int(m.group("m")), m.group("ampm")
    if not (1 <= hour <= 12 and minute < 60) or not (ampm or (
            m.group("cue") and minute in (0, 15, 30, 45))):
        return m.group(0)
    cue = m.group("cue") + " " if m.group("cue") else ""
    return f"{cue}{hour}:{minute:02d}" + (f" {ampm}" if ampm else "")


def _norm_numbers(text: str) -> str:
    text = text.lower().replace("a.m.", "am").replace("p.m.", "pm").replace("’", "'")
    text = re.sub(r"\b(\d{1,2})(am|pm)\b", r"\1 \2", text)
    text = _CLOCK_DIGITS.sub(_clock_digits, text)
    for phrase, minute in _MIN.items():  # longest first
        text = re.sub(rf"\b{phrase}\b", f"{minute:02d}m", text)
    words = []
    for w in re.findall(r"[a-z0-9':]+", text):
        words.append(str(_NUM[w]) if w in _NUM and w != "zero" else w)
    return " ".join(words)


def times_mentioned(text: str) -> set[str]:
    """Every "HH:MM" a text may be saying (both 12-hour readings when am/pm is not said)."""
    t = _norm_numbers(text)
    found: set[tuple[int, int, str | None]] = set()
    if re.search(r"\b(noon|midday)\b", t):
        found.add((12, 0, "pm"))
    if re.search(r"\bmidnight\b", t):
        found.add((0, 0, "am"))
    for m in re.finditer(r"\bhalf past (\d{1,2})\b", t):
        found.add((int(m.group(1)), 30, None))
    for m in re.finditer(r"\bquarter past (\d{1,2})\b", t):
        found.add((int(m.group(1)), 15, None))
    for m in re.finditer(r"\bquarter to (\d{1,2})\b", t):
        found.add(((int(m.group(1)) - 1) % 12 or 12, 45, None))
    # the hour of "half past 12" is not also a bare "12"
    words = re.sub(r"\b(half|quarter) (past|to) \d{1,2}\b", " ", t).split()
    for i, w in enumerate(words):
        nxt = words[i + 1] if i + 1 < len(words) else ""
        after = words[i + 2] if i + 2 < len(words) else ""
        m = re.fullmatch(r"(\d{1,2}):(\d{2})", w)
        if m:
            ampm = nxt if nxt in ("am", "pm") else None
            found.add((int(m.group(1)), int(m.group(2)), ampm))
            continue
        if not re.fullmatch(r"\d{1,2}", w) or int(w) > 23:
            continue
        hour, minute, ampm = int(w), 0, None
        mm = re.fullmatch(r"(\d{2})m?", nxt) if nxt else None
        if nxt in ("o'clock", "oclock", "00m"):
            pass
        elif mm and int(mm.group(1)) < 60 and (nxt.endswith("m") or mm.group(1) in (
                "00", "15", "30", "45")):
            minute = int(mm.group(1))
            nxt = after
        if nxt in ("am", "pm"):
            ampm = nxt
        elif nxt == "in" and after == "the":
            rest = words[i + 3] if i + 3 < len(words) else ""
            ampm = {"morning": "am", "afternoon": "pm", "evening": "pm"}.get(rest)
        found.add((hour, minute, ampm))
    out = set()
    for hour, minute, ampm in found:
        if hour > 12 or ampm is None and hour == 0:
            readings = [hour]
        elif ampm == "am":
            readings = [hour % 12]
        elif ampm == "pm":
            readings = [hour % 12 + 12]
        else:
            readings = [hour % 12, hour % 12 + 12]
        out.update(f"{h:02d}:{minute:02d}" for h in readings if h < 24)
    return out


@functools.lru_cache(maxsize=4096)
def _alias_form(text: str) -> str:
    """A text (or an alias phrase) as aliases are compared: lower case, possessives as plain
    words ("kid's" / "kids'" -> "kids", "children's" -> "childrens"), hyphens between letters
    as spaces ("check-up" -> "check up") and no punctuation, as recognisers write speech."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"(?<=[a-z])-(?=[a-z])", " ", text)
    text = re.sub(r"(?<=[a-z])'s\b", "s", text)
    text = re.sub(r"(?<=[a-z]s)'(?![a-z])", "", text)
    return " ".join(re.findall(r"[a-z0-9']+", text))


def _joined(text: str, vocab: frozenset) -> str:
    """Two neighbouring words written apart whose join is one word of `vocab` (an alias word),
    joined: "check up" -> "checkup" (and "check ups" -> "checkups") when an alias says
    "checkup"."""
    words = text.split()
    out, i = [], 0
    while i < len(words):
        if i + 1 < len(words) and (words[i] + words[i + 1] in vocab or
                                   words[i + 1][-1:] == "s" and len(words[i + 1]) > 1 and
                                   words[i] + words[i + 1][:-1] in vocab):
            out.append(words[i] + words[i + 1])
            i += 2
        else:
            out.append(words[i])
            i += 1
    return " ".join(out)


def _alias_pattern(alias: str) -> str:
    """The regex of one alias phrase: its words in order, each plural word also singular
    ("kids checkup" names "a kid checkup" too), the phrase also plural at its end."""
    words = []
    for w in alias.split():
        w = re.escape(w)
        words.append(w[:-1] + "s?" if len(w) > 3 and w.endswith("s") and not w.endswith("ss")
                     else w)
    return r"\b" + r"\s+".join(words) + r"(s|es)?\b"


def aliased(values: list, blob: str, aliases: dict) -> set:
    """Values of `values` that `blob` names by one of their alias phrases, longest phrase first
    (a phrase inside a longer one that was said does not count: "kids checkup" != "checkup"),
    compared in `_alias_form` ("a kids' check-up" names "kids checkup")."""
    pairs = [(_alias_form(a), v) for v in values if isinstance(v, str)
             for a in aliases.get(v) or () if isinstance(a, str) and a.strip()]
    vocab = frozenset(w for a, _ in pairs for w in a.split())
    phrases = sorted(((_joined(a, vocab), v) for a, v in pairs),
                     key=lambda av: len(av[0]), reverse=True)
    blob = _joined(_alias_form(blob), vocab)
    found = set()
    for alias, v in phrases:
        stem = alias.split()[0][:3]
        if stem not in blob:  # cheap test first: most phrases are not in most texts
            continue
        pattern = _alias_pattern(alias)
        if re.search(pattern, blob):
            found.add(v)
            blob = re.sub(pattern, " ", blob)
    return found
