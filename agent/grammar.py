"""A tiny paraphrase grammar for question templates.

Syntax: `(a|b|c)` picks one alternative, `[x|y]` is an optional choice, `<slot>` is left for the
caller to fill, everything else is literal text. Groups nest:
"(what time|when) do you [usually] (open|start) [on <day>]". `sample(rng)` draws one rendering;
`expand()` lists every rendering (used to prove held-out templates never collide with training
ones). Knows nothing about facts or intents.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from itertools import product

_TOKEN_RE = re.compile(r"[()\[\]|]|[^()\[\]|]+")


@dataclass(frozen=True)
class _Seq:
    parts: tuple  # of str | _Seq | _Alt


@dataclass(frozen=True)
class _Alt:
    options: tuple  # of _Seq


def _parse(text: str) -> _Seq:
    tokens = _TOKEN_RE.findall(text)
    pos = 0

    def seq(closers: str) -> _Seq:
        nonlocal pos
        parts: list = []
        while pos < len(tokens) and tokens[pos] not in closers:
            tok = tokens[pos]
            pos += 1
            if tok == "(":
                options = [seq("|)")]
                while pos < len(tokens) and tokens[pos] == "|":
                    pos += 1
                    options.append(seq("|)"))
                if pos >= len(tokens) or tokens[pos] != ")":
                    raise ValueError(f"unclosed '(' in template {text!r}")
                pos += 1
                parts.append(_Alt(tuple(options)))
            elif tok == "[":
                options = [seq("|]")]
                while pos < len(tokens) and tokens[pos] == "|":
                    pos += 1
                    options.append(seq("|]"))
                if pos >= len(tokens) or tokens[pos] != "]":
                    raise ValueError(f"unclosed '[' in template {text!r}")
                pos += 1
                parts.append(_Alt((*options, _Seq(()))))
            elif tok in ")]|":
                raise ValueError(f"unexpected {tok!r} in template {text!r}")
            else:
                parts.append(tok)
        return _Seq(tuple(parts))

    tree = seq("")
    if pos != len(tokens):
        raise ValueError(f"unexpected {tokens[pos]!r} in template {text!r}")
    return tree


def _tidy(text: str) -> str:
    return " ".join(text.split())


class Template:
    """One question template; `text` is its source, also its identity."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._tree = _parse(text)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"

    def sample(self, rng: random.Random) -> str:
        def walk(node) -> str:
            if isinstance(node, str):
                return node
            if isinstance(node, _Alt):
                return walk(rng.choice(node.options))
            return "".join(walk(p) for p in node.parts)

        return _tidy(walk(self._tree))

    def expand(self, limit: int = 100_000) -> list[str]:
        def walk(node) -> list[str]:
            if isinstance(node, str):
                return [node]
            if isinstance(node, _Alt):
                return [s for opt in node.options for s in walk(opt)]
            out = [""]
            for part in node.parts:
                out = ["".join(pair) for pair in product(out, walk(part))]
                if len(out) > limit:
                    raise ValueError(f"template {self.text!r} expands to more than {limit} strings")
            return out

        return sorted({_tidy(s) for s in walk(self._tree)})
