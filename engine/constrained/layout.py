"""JSON-schema values -> a fixed token layout: fixed tokens and value slots of fixed width.

    layout = compile_value(schema, tokenizer, prefix_text, suffix_text)   # or compile_call(...)
The wire text of a value (`json.dumps(..., ensure_ascii=False)`, default separators, object keys
in `properties` order, every property present) is cut into fixed text and value slots:
  * a required string's quotes are fixed; the slot is its content;
  * any other value (enum of non-strings, integer, boolean, null, nullable string) is one slot
    holding the whole JSON value (with the space after `": ` moved into it, as BPE merges it).
Tokenization follows the wire text: a Choice slot's candidates are tokenized jointly with the
fixed text around them, so tokens that merge across a value's edges (`", `, `"}}`, or a
`"time": null}}` added token) are the slot's own; a Free slot's terminator is the first token of
the text after it. A slot's width is its longest token sequence. This static layout (every
value at its widest; shorter values padded with single-space tokens where JSON allows
whitespace) fixes the answer's maximum length and each slot's token rows; the decoder
(state.py) lays each piece of fixed text right behind the value actually decoded, so the canvas
is the exact wire text.

Slot kinds (slots.py): `Choice` (a finite candidate list: enum, const, boolean, null, time of day
"HH:MM" by pattern (matched in RE2: linear time whatever the pattern), integer ranges up to
MAX_CHOICES values; nullable variants add `null`) and `Free` (free text with a token and
character bound, or unbounded integers). Anything else
(arrays, `oneOf`, `number` fractions, unknown patterns, nullable free text) raises ValueError
naming the schema path. A request's schemas are bounded before they get here
(limits.check_request) and the compile runs under a Budget (time, cancellation). Knows nothing
about models or decoding passes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import re2

from diffvoice.engine.constrained.limits import Budget
from diffvoice.engine.constrained.slots import Choice, Free, Vocab

MAX_CHOICES = 2000
DEFAULT_STRING_TOKENS = 24   # token bound of a free string without maxLength
MAX_STRING_TOKENS = 64
MAX_STRING_CHARS = 4096      # a maxLength above this bounds nothing a slot can hold
ALL_TIMES = tuple(f"{h:02d}:{m:02d}" for h in range(24) for m in range(60))
# a pattern is taken as a set of "HH:MM" times when it rejects all of these
_NOT_TIMES = ("", "a", "9:00", "24:00", "12:60", "1200", "12:00:00", "x12:00", "12:00x", "ab:cd")


@dataclass
class Layout:
    """Relative positions 0..length-1 of an answer: fixed tokens and slots, then EOS."""

    fixed: dict[int, int]            # position -> token id (laid up front)
    slots: list[tuple[int, object]]  # (start position, Choice | Free), in order
    length: int                      # tokens including the final EOS
    template: list                   # value tree: nested dict/None with slot indices (assembly)


class _Builder:
    """Accumulates fixed text and slots while walking a schema."""

    def __init__(self, vocab: Vocab, budget: Budget | None = None):
        self.vocab = vocab
        self.budget = budget
        self.items: list = []  # str (fixed text) | slot spec

    def text(self, s: str) -> None:
        if self.items and isinstance(self.items[-1], str):
            self.items[-1] += s
        else:
            self.items.append(s)

    def slot(self, make) -> int:
        self.items.append(make)
        return sum(1 for it in self.items if not isinstance(it, str)) - 1

    def value(self, schema: dict, path: str):
        """Emit `schema`'s value; return its assembly template."""
        if not isinstance(schema, dict):
            raise ValueError(f"{path}: a schema must be an object")
        if self.budget is not None:
            self.budget.check(path)
        for bad in ("oneOf", "anyOf", "allOf", "$ref", "not", "if"):
            if bad in schema:
                raise ValueError(f"{path}: '{bad}' is not supported by constrained decoding")
        types = schema.get("type")
        types = [types] if isinstance(types, str) else list(types or [])
        nullable = "null" in types
        base = [t for t in types if t != "null"]
        if "const" in schema:
            return ("slot", self.slot(_ChoiceSpec([schema["const"]], path, budget=self.budget)))
        if "enum" in schema:
            if not isinstance(schema["enum"], list | tuple):
                raise ValueError(f"{path}: 'enum' must be a list")
            values = list(schema["enum"])
            if not values:
                raise ValueError(f"{path}: 'enum' must not be empty")
            if nullable and None not in values:
                values.append(None)
            if not nullable and all(isinstance(v, str) for v in values):
                self.text('"')
                idx = self.slot(_ChoiceSpec(values, path, content=True, budget=self.budget))
                self.text('"')
                return ("slot", idx)
            return ("slot", self.slot(_ChoiceSpec(values, path, budget=self.budget)))
        if not base and nullable:
            return ("slot", self.slot(_ChoiceSpec([None], path, budget=self.budget)))
        if len(base) != 1:
            raise ValueError(f"{path}: 'type' must name one type (optionally with 'null'), "
                             f"got {schema.get('type')!r}")
        kind = base[0]
        if kind == "object":
            props = schema.get("properties") or {}
            if not isinstance(props, dict):
                raise ValueError(f"{path}.properties: must be an object of schemas")
            self.text("{")
            out = {}
            for i, (key, sub) in enumerate(props.items()):
                if i:
                    self.text(", ")
                self.text(json.dumps(key, ensure_ascii=False) + ": ")
                out[key] = self.value(sub, f"{path}.{key}")
            self.text("}")
            if nullable:
                raise ValueError(f"{path}: a nullable object is not supported")
            return ("object", out)
        if kind == "boolean":
            return ("slot", self.slot(_ChoiceSpec([True, False] + [None] * nullable, path,
                                                  budget=self.budget)))
        if kind in ("integer", "number"):
            lo, hi = schema.get("minimum"), schema.get("maximum")
            for key, v in (("minimum", lo), ("maximum", hi)):
                if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                                      or abs(v) > 2 ** 53):
                    raise ValueError(f"{path}.{key}: must be a finite number within ±2^53")
            if lo is not None and hi is not None and hi - lo + 1 <= MAX_CHOICES:
                values = list(range(int(-(-lo // 1)), int(hi // 1) + 1))
                if not values:
                    raise ValueError(f"{path}: empty integer range [{lo}, {hi}]")
                return ("slot", self.slot(_ChoiceSpec(values + [None] * nullable, path,
                                                      budget=self.budget)))
            if nullable:
                raise ValueError(f"{path}: a nullable unbounded integer is not supported")
            return ("slot", self.slot(_FreeSpec("integer", path, lo=lo, hi=hi)))
        if kind == "string":
            pattern = schema.get("pattern")
            if pattern is not None:
                times = _pattern_times(pattern, path)
                if nullable:
                    return ("slot", self.slot(_ChoiceSpec(times + [None], path,
                                                          budget=self.budget)))
                self.text('"')
                idx = self.slot(_ChoiceSpec(times, path, content=True, budget=self.budget))
                self.text('"')
                return ("slot", idx)
            if nullable:
                raise ValueError(f"{path}: a nullable free string is not supported (give an "
                                 "enum or a pattern, or make it required)")
            min_len = _length(schema, "minLength", 1, path)
            max_len = _length(schema, "maxLength", None, path)
            max_tokens = min(max_len, MAX_STRING_TOKENS) if max_len else DEFAULT_STRING_TOKENS
            if min_len > max_tokens:
                raise ValueError(f"{path}: minLength {min_len} exceeds the slot bound "
                                 f"{max_tokens} tokens")
            self.text('"')
            idx = self.slot(_FreeSpec("string", path, min_chars=max(min_len, 1),
                                      max_chars=min(max_len, MAX_STRING_CHARS) if max_len
                                      else None,
                                      max_tokens=max(max_tokens, 1)))
            self.text('"')
            return ("slot", idx)
        raise ValueError(f"{path}: type {kind!r} is not supported by constrained decoding")


def _length(schema: dict, key: str, default, path: str):
    """minLength / maxLength as a non-negative int (any size: callers clamp it)."""
    value = schema.get(key, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value \
            or value in (float("inf"), float("-inf")) or value < 0 or value != int(value):
        raise ValueError(f"{path}.{key}: must be a non-negative integer")
    return int(value)


# RE2 writes every pattern it cannot parse to stderr by itself: a client's bad pattern is
# answered (400), not logged once per request
_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False


def _pattern_times(pattern, path: str) -> list[str]:
    """The "HH:MM" times a client's pattern accepts. The pattern runs in RE2 (linear time in
    the text, whatever the pattern: no client regex can backtrack for seconds); constructs RE2
    lacks (backreferences, lookaround) are refused."""
    if not isinstance(pattern, str):
        raise ValueError(f"{path}.pattern: must be a string")
    try:
        rx = re2.compile(pattern, _RE2_OPTIONS)
    except re2.error as exc:
        raise ValueError(f"{path}: bad or unsupported pattern {pattern!r} (patterns are matched "
                         f"by RE2: no backreferences or lookaround): {exc}") from exc
    times = [t for t in ALL_TIMES if rx.search(t)]
    if not times or any(rx.search(s) for s in _NOT_TIMES):
        raise ValueError(f"{path}: only time-of-day patterns (\"HH:MM\") are supported, got "
                         f"{pattern!r}")
    return times


def _legal_splits(text: str, in_string: bool) -> set[int]:
    """Indices of `text` (a JSON fragment) where whitespace may be inserted."""
    legal, escaped = set(), False
    for i, ch in enumerate(text):
        if not in_string:
            legal.add(i)
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
    if not in_string:
        legal.add(len(text))
    return legal


class _ChoiceSpec:
    def __init__(self, values: list, path: str, content: bool = False,
                 budget: Budget | None = None):
        self.values, self.path, self.content = values, path, content
        self.budget = budget
        if budget is not None:  # counted as the schema is walked: refused before any is built
            budget.spend(len(values), path)
        self._built: dict[tuple[str, str], tuple] = {}  # (before, after) -> build()

    def build(self, vocab: Vocab, before: str, after: str):
        """Tokenize `before + value + after` for every candidate, jointly (so merges across
        the value's edges come out as the model saw them in training); the tokens common to all
        candidates at the front (within `before`) are fixed, the common tail (within `after`,
        starting where JSON allows whitespace) is handed on as text; the middle is the slot.
        -> (fixed ids, Choice, text still to lay). Memoised per (before, after): the tool-name
        slot is one spec shared by every tool's layout, built once."""
        done = self._built.get((before, after))
        if done is None:
            done = self._built[(before, after)] = self._build(vocab, before, after)
        return done

    def _build(self, vocab: Vocab, before: str, after: str):
        texts = [json.dumps(v, ensure_ascii=False) for v in self.values]
        if self.content:  # string content between fixed quotes
            texts = [t[1:-1] for t in texts]
        rows = []
        for i, t in enumerate(texts):
            if self.budget is not None and i % 64 == 0:
                self.budget.check(self.path)
            rows.append(vocab.encode(before + t + after))
        n = 0
        while all(len(r) > n for r in rows) and len({r[n] for r in rows}) == 1 \
                and len(vocab.decode(rows[0][: n + 1])) <= len(before):
            n += 1
        legal = _legal_splits(after, in_string=self.content)
        m, k = 0, 0  # m: the longest common tail (tokens) that starts at a legal split
        while all(len(r) - n > k for r in rows) and len({r[-1 - k] for r in rows}) == 1:
            k += 1
            tail = len(vocab.decode(rows[0][len(rows[0]) - k:]))
            if tail > len(after):
                break
            if len(after) - tail in legal:
                m = k
        tail_text = after[len(after) - len(vocab.decode(rows[0][len(rows[0]) - m:])):] if m \
            else ""
        middles = [r[n: len(r) - m] for r in rows]
        return rows[0][:n], Choice.build(vocab, self.values, middles, self.path), tail_text


class _FreeSpec:
    def __init__(self, kind: str, path: str, **bounds):
        self.kind, self.path, self.bounds = kind, path, bounds

    def build(self, vocab: Vocab, before: str, after: str):
        """Fixed `before`; body; terminator = the first token of `after` (its rest handed on)."""
        term = vocab.encode(after)[0]
        rest = after[len(vocab.decode([term])):]
        return vocab.encode(before), Free(vocab, self.kind, term, self.path, **self.bounds), rest


def _finish(builder: _Builder, template, eos_id: int, first_after: str | None = None) -> Layout:
    vocab = builder.vocab
    fixed: dict[int, int] = {}
    slots: list[tuple[int, object]] = []
    pos = 0
    items = builder.items
    if not items or not isinstance(items[0], str) or not isinstance(items[-1], str):
        raise ValueError("a layout must start and end with fixed text")
    pending = items[0]  # fixed text not yet tokenized
    for i in range(1, len(items), 2):
        spec, after = items[i], items[i + 1]
        if not isinstance(after, str):
            raise ValueError("two value slots without text between them")
        rest = ""
        if i == 1 and first_after is not None:  # the tool name: same slot for every tool
            after, rest = after[: len(first_after)], after[len(first_after):]
        ids, slot, pending = spec.build(vocab, pending, after)
        pending += rest
        for tid in ids:
            fixed[pos] = tid
            pos += 1
        slots.append((pos, slot))
        pos += slot.width
    for tid in vocab.encode(pending) if pending else []:
        fixed[pos] = tid
        pos += 1
    fixed[pos] = eos_id
    return Layout(fixed, slots, pos + 1, template)


def compile_value(schema: dict, vocab: Vocab, eos_id: int, path: str = "response_format",
                  budget: Budget | None = None) -> Layout:
    """Layout of one JSON value (response_format json_schema): the answer is the value, EOS."""
    b = _Builder(vocab, budget)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError(f"{path}: the top-level schema must be an object (\"type\": \"object\")")
    template = b.value(schema, path)
    return _finish(b, template, eos_id)


def _call_builder(name_spec: _ChoiceSpec, name: str, parameters: dict, vocab: Vocab,
                  open_text: str, close_text: str, budget: Budget | None) -> _Builder:
    b = _Builder(vocab, budget)
    b.text(f'{open_text}\n{{"name": "')
    name_idx = b.slot(name_spec)
    b.text('", "arguments": ')
    args = b.value(parameters, f"tools[{name}].parameters")
    b.text(f"}}\n{close_text}")
    b.template = ("call", name_idx, args)
    return b


def name_after_text(texts: list[str]) -> str:
    """The longest common start of every tool's text after its name, cut where JSON allows
    whitespace (the tool-name slot must be one slot for all tools)."""
    common = texts[0]
    for t in texts[1:]:
        k = 0
        while k < min(len(common), len(t)) and common[k] == t[k]:
            k += 1
        common = common[:k]
    legal = _legal_splits(common, in_string=True)
    return common[: max(i for i in legal if i <= len(common))] if legal else ""


def compile_calls(functions: list[tuple[str, dict]], forced: str | None, vocab: Vocab,
                  eos_id: int, open_text: str, close_text: str,
                  budget: Budget | None = None) -> dict[str, Layout]:
    """Layouts of one Hermes-style call per tool; the name slot chooses among the tools (or is
    the forced one) and is laid identically in every layout (one spec, tokenized once: linear
    in the number of tools)."""
    names = [n for n, _ in functions] if forced is None else [forced]
    name_spec = _ChoiceSpec(list(names), "tool name", content=True, budget=budget)
    builders = {n: _call_builder(name_spec, n, p, vocab, open_text, close_text, budget)
                for n, p in functions}
    after = name_after_text([b.items[2] for b in builders.values()])
    return {n: _finish(b, b.template, eos_id, first_after=after) for n, b in builders.items()}
