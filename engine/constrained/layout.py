"""JSON-schema values -> a fixed token layout: fixed tokens and value slots of fixed width.

    layout = compile_value(schema, tokenizer, prefix_text, suffix_text)   # or compile_call(...)
The wire text of a value (`json.dumps(..., ensure_ascii=False)`, default separators, object keys
in `properties` order, every property present) is cut into fixed text and value slots:
  * a required string's quotes are fixed; the slot is its content;
  * any other value (enum of non-strings, integer, boolean, null, nullable string) is one slot
    holding the whole JSON value (with the space after `": ` moved into it, as BPE merges it).
Each piece of fixed text after a slot is tokenized on its own; its FIRST token is the slot's
terminator (e.g. `",` or `"}}` in a tokenizer with JSON merges) and belongs to the slot; the rest
is laid on the canvas up front. A slot has a fixed width: its longest value plus the terminator;
a shorter value is followed by its terminator and then single-space tokens (JSON whitespace) up
to the width. So the canvas text always is valid JSON that differs from the wire text only by
those spaces.

Slot kinds (slots.py): `Choice` (a finite candidate list: enum, const, boolean, null, time of day
"HH:MM" by pattern, integer ranges up to MAX_CHOICES values; nullable variants add `null`) and
`Free` (free text with a token and character bound, or unbounded integers). Anything else
(arrays, `oneOf`, `number` fractions, unknown patterns, nullable free text) raises ValueError
naming the schema path. Knows nothing about models or decoding passes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from engine.constrained.slots import Choice, Free, Vocab

MAX_CHOICES = 2000
DEFAULT_STRING_TOKENS = 24   # token bound of a free string without maxLength
MAX_STRING_TOKENS = 64
INT_TOKENS = 8
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

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        self.items: list = []  # str (fixed text) | (slot factory, lead)

    def text(self, s: str) -> None:
        if self.items and isinstance(self.items[-1], str):
            self.items[-1] += s
        else:
            self.items.append(s)

    def slot(self, make) -> int:
        lead = ""
        if make.takes_lead and self.items and isinstance(self.items[-1], str) \
                and self.items[-1].endswith(" "):
            self.items[-1] = self.items[-1][:-1]
            lead = " "
        self.items.append((make, lead))
        return sum(1 for it in self.items if not isinstance(it, str)) - 1

    def value(self, schema: dict, path: str):
        """Emit `schema`'s value; return its assembly template."""
        if not isinstance(schema, dict):
            raise ValueError(f"{path}: a schema must be an object")
        for bad in ("oneOf", "anyOf", "allOf", "$ref", "not", "if"):
            if bad in schema:
                raise ValueError(f"{path}: '{bad}' is not supported by constrained decoding")
        types = schema.get("type")
        types = [types] if isinstance(types, str) else list(types or [])
        nullable = "null" in types
        base = [t for t in types if t != "null"]
        if "const" in schema:
            return ("slot", self.slot(_ChoiceSpec([schema["const"]], path)))
        if "enum" in schema:
            values = list(schema["enum"])
            if not values:
                raise ValueError(f"{path}: 'enum' must not be empty")
            if nullable and None not in values:
                values.append(None)
            if not nullable and all(isinstance(v, str) for v in values):
                self.text('"')
                idx = self.slot(_ChoiceSpec(values, path, content=True))
                self.text('"')
                return ("slot", idx)
            return ("slot", self.slot(_ChoiceSpec(values, path)))
        if not base and nullable:
            return ("slot", self.slot(_ChoiceSpec([None], path)))
        if len(base) != 1:
            raise ValueError(f"{path}: 'type' must name one type (optionally with 'null'), "
                             f"got {schema.get('type')!r}")
        kind = base[0]
        if kind == "object":
            props = schema.get("properties") or {}
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
            return ("slot", self.slot(_ChoiceSpec([True, False] + [None] * nullable, path)))
        if kind in ("integer", "number"):
            lo, hi = schema.get("minimum"), schema.get("maximum")
            if lo is not None and hi is not None and hi - lo + 1 <= MAX_CHOICES:
                values = list(range(int(-(-lo // 1)), int(hi // 1) + 1))
                if not values:
                    raise ValueError(f"{path}: empty integer range [{lo}, {hi}]")
                return ("slot", self.slot(_ChoiceSpec(values + [None] * nullable, path)))
            if nullable:
                raise ValueError(f"{path}: a nullable unbounded integer is not supported")
            return ("slot", self.slot(_FreeSpec("integer", path, lo=lo, hi=hi)))
        if kind == "string":
            pattern = schema.get("pattern")
            if pattern is not None:
                times = _pattern_times(pattern, path)
                if nullable:
                    return ("slot", self.slot(_ChoiceSpec(times + [None], path)))
                self.text('"')
                idx = self.slot(_ChoiceSpec(times, path, content=True))
                self.text('"')
                return ("slot", idx)
            if nullable:
                raise ValueError(f"{path}: a nullable free string is not supported (give an "
                                 "enum or a pattern, or make it required)")
            min_len = int(schema.get("minLength", 1) or 0)
            max_len = schema.get("maxLength")
            max_tokens = min(int(max_len), MAX_STRING_TOKENS) if max_len else DEFAULT_STRING_TOKENS
            if min_len > max_tokens:
                raise ValueError(f"{path}: minLength {min_len} exceeds the slot bound "
                                 f"{max_tokens} tokens")
            self.text('"')
            idx = self.slot(_FreeSpec("string", path, min_chars=max(min_len, 1),
                                      max_chars=int(max_len) if max_len else None,
                                      max_tokens=max(max_tokens, 1)))
            self.text('"')
            return ("slot", idx)
        raise ValueError(f"{path}: type {kind!r} is not supported by constrained decoding")


def _pattern_times(pattern: str, path: str) -> list[str]:
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{path}: bad pattern {pattern!r}: {exc}") from exc
    times = [t for t in ALL_TIMES if rx.search(t)]
    if not times or any(rx.search(s) for s in _NOT_TIMES):
        raise ValueError(f"{path}: only time-of-day patterns (\"HH:MM\") are supported, got "
                         f"{pattern!r}")
    return times


class _ChoiceSpec:
    takes_lead = True

    def __init__(self, values: list, path: str, content: bool = False):
        self.values, self.path, self.content = values, path, content
        self.takes_lead = not content

    def build(self, vocab: Vocab, lead: str, terminator: int) -> Choice:
        texts = [json.dumps(v, ensure_ascii=False) for v in self.values]
        if self.content:  # string content between fixed quotes
            texts = [t[1:-1] for t in texts]
        return Choice.build(vocab, self.values, [lead + t for t in texts], terminator, self.path)


class _FreeSpec:
    takes_lead = False

    def __init__(self, kind: str, path: str, **bounds):
        self.kind, self.path, self.bounds = kind, path, bounds

    def build(self, vocab: Vocab, lead: str, terminator: int) -> Free:
        return Free(vocab, self.kind, terminator, self.path, **self.bounds)


def _finish(builder: _Builder, template, eos_id: int) -> Layout:
    vocab = builder.vocab
    fixed: dict[int, int] = {}
    slots: list[tuple[int, object]] = []
    pos = 0
    items = builder.items
    pending = None  # (spec, lead) waiting for its terminator
    for item in items:
        if isinstance(item, str):
            ids = vocab.encode(item)
            if pending is not None:
                spec, lead = pending
                slot = spec.build(vocab, lead, ids[0])
                slots.append((pos, slot))
                pos += slot.width
                ids = ids[1:]
                pending = None
            for tid in ids:
                fixed[pos] = tid
                pos += 1
        else:
            if pending is not None:
                raise ValueError("two value slots without text between them")
            pending = item
    if pending is not None:
        raise ValueError("a layout must end with fixed text")
    fixed[pos] = eos_id
    return Layout(fixed, slots, pos + 1, template)


def compile_value(schema: dict, vocab: Vocab, eos_id: int, path: str = "response_format") -> Layout:
    """Layout of one JSON value (response_format json_schema): the answer is the value, EOS."""
    b = _Builder(vocab)
    if not isinstance(schema, dict) or schema.get("type") != "object":
        raise ValueError(f"{path}: the top-level schema must be an object (\"type\": \"object\")")
    template = b.value(schema, path)
    return _finish(b, template, eos_id)


def compile_call(tool_names: list[str], name: str, parameters: dict, vocab: Vocab, eos_id: int,
                 open_text: str, close_text: str) -> Layout:
    """Layout of one Hermes-style call of `name` (the name slot chooses among `tool_names`)."""
    b = _Builder(vocab)
    b.text(f'{open_text}\n{{"name": "')
    name_idx = b.slot(_ChoiceSpec(list(tool_names), "tool name", content=True))
    b.text('", "arguments": ')
    args = b.value(parameters, f"tools[{name}].parameters")
    b.text(f"}}\n{close_text}")
    return _finish(b, ("call", name_idx, args), eos_id)
