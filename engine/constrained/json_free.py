"""Free-form JSON (response_format {"type": "json_object"}): a character-level JSON automaton.

    slot = JsonObjectSlot(vocab, width)   # the whole answer: one JSON object, then pads
A pushdown automaton over characters (`step(state, ch) -> state | None`; states are hashable
tuples) decides which tokens may come next: a token is allowed when every character of it keeps
the text a valid JSON prefix AND the object can still be closed in the positions left
(`closing_cost`, in characters; every closing character exists as a one-character token). The
slot is decoded left to right like engine.constrained.slots.Free; it ends when the object
closes (the answer's EOS is laid right behind it). Allowed-token masks are cached per
automaton state.
Cost: one pass over the vocabulary's token texts per new state (fine for small vocabularies;
for 150k-token vocabularies expect a few hundred ms per new state on a CPU core).
"""

from __future__ import annotations

import json

import torch

_WS = " \t\n\r"
_LITERALS = ("true", "false", "null")
MAX_DEPTH = 8

# state: (stack, mode, extra) ; stack: tuple of "{" / "["
# modes: start, value, key_or_end (after "{"), key (after ","), colon, after, string, escape,
#        unicode (extra = hex digits left), literal (extra = rest), num_* (number parts), done


def _after_value(stack):
    return (stack, "after", "") if stack else (stack, "done", "")


def step(state, ch: str):
    stack, mode, extra = state
    if mode in ("string", "escape", "unicode"):
        is_key = extra.startswith("k")
        if mode == "unicode":
            if ch not in "0123456789abcdefABCDEF":
                return None
            left = int(extra[1:]) - 1
            return (stack, "string", extra[0]) if left == 0 else (stack, "unicode",
                                                                    extra[0] + str(left))
        if mode == "escape":
            if ch == "u":
                return (stack, "unicode", extra[0] + "4")
            return (stack, "string", extra[0]) if ch in '"\\/bfnrt' else None
        if ch == '"':
            return (stack, "colon", "") if is_key else _after_value(stack)
        if ch == "\\":
            return (stack, "escape", extra[0])
        return state if ord(ch) >= 0x20 else None
    if mode == "literal":
        if ch != extra[0]:
            return None
        return (stack, "literal", extra[1:]) if len(extra) > 1 else _after_value(stack)
    if mode.startswith("num_"):
        nxt = _number(mode, ch)
        if nxt is not None:
            return (stack, nxt, "")
        if mode in ("num_zero", "num_int", "num_frac", "num_exp"):  # the number ended
            return step(_after_value(stack), ch)
        return None
    if ch in _WS:
        return None if mode in ("start", "done") else state
    if mode == "start":
        return ((("{",), "key_or_end", "") if ch == "{" else None)
    if mode == "done":
        return None
    if mode in ("key_or_end", "key"):
        if ch == '"':
            return (stack, "string", "k")
        if ch == "}" and mode == "key_or_end":
            return _after_value(stack[:-1])
        return None
    if mode == "colon":
        return (stack, "value", "") if ch == ":" else None
    if mode == "after":
        if ch == ",":
            return (stack, "key", "") if stack[-1] == "{" else (stack, "value", "")
        if ch == "}" and stack[-1] == "{" or ch == "]" and stack[-1] == "[":
            return _after_value(stack[:-1])
        return None
    if mode in ("value", "value_or_end"):
        if ch == "]" and mode == "value_or_end":
            return _after_value(stack[:-1])
        if ch == '"':
            return (stack, "string", "v")
        if ch in "{[":
            if len(stack) >= MAX_DEPTH:
                return None
            return (stack + (ch,), "key_or_end" if ch == "{" else "value_or_end", "")
        if ch == "-":
            return (stack, "num_sign", "")
        if ch == "0":
            return (stack, "num_zero", "")
        if ch in "123456789":
            return (stack, "num_int", "")
        for lit in _LITERALS:
            if ch == lit[0]:
                return (stack, "literal", lit[1:])
        return None
    return None


def _number(mode: str, ch: str) -> str | None:
    digit = ch in "0123456789"
    table = {
        "num_sign": "num_zero" if ch == "0" else ("num_int" if digit else None),
        "num_zero": "num_dot" if ch == "." else ("num_e" if ch in "eE" else None),
        "num_int": "num_int" if digit else ("num_dot" if ch == "." else
                                            ("num_e" if ch in "eE" else None)),
        "num_dot": "num_frac" if digit else None,
        "num_frac": "num_frac" if digit else ("num_e" if ch in "eE" else None),
        "num_e": "num_exp" if digit else ("num_esign" if ch in "+-" else None),
        "num_esign": "num_exp" if digit else None,
        "num_exp": "num_exp" if digit else None,
    }
    return table.get(mode)


def closing_cost(state) -> int:
    """Fewest characters that complete the document from `state`."""
    stack, mode, extra = state
    base = len(stack)
    if mode == "start":
        return 2
    if mode == "string":
        return base + (4 if extra == "k" else 1)  # '":0' closes a key with a value
    if mode in ("escape", "unicode"):
        more = 1 if mode == "escape" else int(extra[1:])
        return base + more + (4 if extra.startswith("k") else 1)
    if mode == "literal":
        return base + len(extra)
    if mode in ("num_sign", "num_dot", "num_e", "num_esign"):
        return base + 1
    return base + {"key": 4, "colon": 2, "value": 1}.get(mode, 0)


class JsonObjectSlot:
    """The whole answer as one JSON object (left to right, then pads)."""

    kind = "free"

    def __init__(self, vocab, width: int, path: str = "response_format"):
        self.vocab, self.width, self.path = vocab, width, path
        for ch in '{}[]":,0tfnrueals':
            if ch not in vocab.single_chars:
                raise ValueError(f"{path}: json_object needs a one-character token for {ch!r}")
        self._cache: dict = {}

    def _state(self, body: list[int]):
        state = ((), "start", "")
        for t in body:
            for ch in self.vocab.texts[t]:
                state = step(state, ch)
        return state

    def body(self, committed: dict[int, int]) -> tuple[list[int], bool]:
        out = []
        for j in range(self.width):
            t = committed.get(j)
            if t is None:
                break
            out.append(t)
        return out, bool(out) and self._state(out)[1] == "done"

    def resolve(self, committed: dict[int, int]) -> tuple[int, object] | None:
        body, done = self.body(committed)
        return (len(body), self.value(committed)) if done else None

    def allowed(self, body: list[int], device: torch.device) -> torch.Tensor:
        state = self._state(body)
        left = self.width - len(body) - 1  # positions after this one
        key = (state, min(left, 2 * MAX_DEPTH + 8), str(device))
        mask = self._cache.get(key)
        if mask is None:
            ok = []
            for text in self.vocab.texts:
                s = state
                if text and self.vocab.string_ok(text):
                    for ch in text:
                        s = step(s, ch)
                        if s is None:
                            break
                    ok.append(s is not None and closing_cost(s) <= left)
                else:
                    ok.append(False)
            mask = torch.tensor(ok, dtype=torch.bool, device=device)
            if len(self._cache) < 4096:
                self._cache[key] = mask
        return mask

    def value(self, committed: dict[int, int]):
        body, done = self.body(committed)
        if not done:
            raise ValueError(f"{self.path}: the JSON object was not closed")
        return json.loads(self.vocab.decode(body))
