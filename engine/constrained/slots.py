"""Value slots of a constrained layout and the token classes they draw from.

  Vocab(tokenizer)   per-tokenizer tables: each token's text, which tokens may appear inside a
                     JSON string (no quote, backslash, control character or broken UTF-8, not an
                     added/special token), digit tokens, character counts; the pad (a token that
                     decodes to one space) and device masks built lazily per device.
  Choice             a finite list of values, each a fixed token sequence (the value tokenized
                     with the text around it), then pads up to the common width. Decoded
                     jointly: among the
                     candidates consistent with what is already committed, the one with the
                     highest mean log-probability over its visible (unpadded) positions
                     is forced into every masked slot position in view (pads are not scored).
  Free               free text (a JSON string's content) or an integer: body tokens from a class,
                     then the terminator, then pads. Decoded left to right inside the slot (only
                     the leftmost masked position may commit in a pass), so the token-level rule
                     (class, character budget, "terminator only once the minimum is met, or when
                     the body is full") always holds. The value is assembled from the body.
Validity by construction: every candidate is a valid value of its schema, and a Free body decodes
to a value inside its bounds (integers are clamped to minimum/maximum). Knows nothing about the
engine.
"""

from __future__ import annotations

import re

import torch

_INT_FIRST = re.compile(r"^-?(0|[1-9]\d*)$")  # JSON: no leading zeros
_DIGITS = re.compile(r"^\d+$")


INT_TOKENS = 8  # token bound of an integer slot (re-exported by engine.constrained.layout)

class Vocab:
    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        tok = tokenizer.tokenizer
        self.size = tok.get_vocab_size()
        added = {t.content for t in tok.get_added_tokens_decoder().values()} \
            if hasattr(tok, "get_added_tokens_decoder") else set()
        self.texts = []
        for i in range(self.size):
            piece = tok.id_to_token(i)
            self.texts.append(None if piece in added else tok.decode([i],
                                                                     skip_special_tokens=False))
        pad = self.encode(" ")
        if len(pad) != 1:
            raise ValueError("constrained decoding needs a token that decodes to one space")
        self.pad = pad[0]
        self.safe = [t is not None and t != "" and "\ufffd" not in t and '"' not in t
                     and "\\" not in t and not any(ord(c) < 0x20 or ord(c) == 0x7f for c in t)
                     for t in self.texts]
        self.chars = [len(t) if t else 0 for t in self.texts]
        self.lead_space = [bool(t) and t[0].isspace() for t in self.texts]
        self.int_first = [t is not None and bool(_INT_FIRST.match(t)) for t in self.texts]
        self.digits = [t is not None and bool(_DIGITS.match(t)) for t in self.texts]
        if not any(s and c == 1 for s, c in zip(self.safe, self.chars, strict=True)):
            raise ValueError("constrained decoding needs single-character string tokens")
        self.single_chars = {t for t in self.texts if t and len(t) == 1}
        self._device: dict[str, dict[str, torch.Tensor]] = {}

    @staticmethod
    def string_ok(text: str) -> bool:
        """Whole characters only (no broken UTF-8 piece)."""
        return "\ufffd" not in text

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.tokenizer.decode(ids, skip_special_tokens=False)

    def tables(self, device: torch.device) -> dict[str, torch.Tensor]:
        key = str(device)
        if key not in self._device:
            b = lambda xs: torch.tensor(xs, dtype=torch.bool, device=device)  # noqa: E731
            self._device[key] = {
                "safe": b(self.safe), "safe_first": b([s and not ls for s, ls in zip(
                    self.safe, self.lead_space, strict=True)]),
                "int_first": b(self.int_first), "digits": b(self.digits),
                "chars": torch.tensor(self.chars, dtype=torch.long, device=device)}
        return self._device[key]


class Choice:
    """A slot whose value is one of `values`; `seqs[k]` is candidate k's padded token row."""

    kind = "choice"

    def __init__(self, values: list, seqs: list[list[int]], lengths: list[int], path: str):
        self.values, self.seqs, self.lengths, self.path = values, seqs, lengths, path
        self.width = len(seqs[0])

    @classmethod
    def build(cls, vocab: Vocab, values: list, rows: list[list[int]], path: str) -> Choice:
        seen = {}
        for value, ids in zip(values, rows, strict=True):
            if tuple(ids) in seen and seen[tuple(ids)] != value:
                raise ValueError(f"{path}: values {seen[tuple(ids)]!r} and {value!r} tokenize "
                                 "the same")
            seen[tuple(ids)] = value
        width = max(len(r) for r in rows)
        seqs = [r + [vocab.pad] * (width - len(r)) for r in rows]
        return cls(values, seqs, [len(r) for r in rows], path)

    def _tables(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        cached = getattr(self, "_dev", None)
        if cached is None or cached[0].device != device:
            seqs = torch.tensor(self.seqs, dtype=torch.long, device=device)
            live = torch.arange(self.width, device=device)[None, :] < torch.tensor(
                self.lengths, device=device)[:, None]
            self._dev = cached = (seqs, live)
        return cached

    def consistent(self, committed: dict[int, int], device=None) -> torch.Tensor:
        """Bool [K]: candidates agreeing with every committed slot position (offset -> token)."""
        seqs, _ = self._tables(device or torch.device("cpu"))
        ok = torch.ones(len(self.values), dtype=torch.bool, device=seqs.device)
        if committed:
            js = torch.tensor(list(committed), device=seqs.device)
            vals = torch.tensor(list(committed.values()), device=seqs.device)
            ok = (seqs[:, js] == vals[None, :]).all(-1)
        return ok

    def best(self, committed: dict[int, int], inside: list[int], windows: list[int],
             logp: torch.Tensor) -> int:
        """The consistent candidate with the highest MEAN log-prob over its visible
        value+terminator positions `inside` (slot offsets; `windows` their window indices).
        Mean, not sum: a sum favours the shortest candidate (`null` over "08:30", "ivy" over
        "ivy hayes"); on the receptionist's held-out calls the mean picked the right time in
        30 of 31 calls against 28 for the sum, the right name in 25 of 28 against 19."""
        seqs, live = self._tables(logp.device)
        ok = self.consistent(committed, logp.device)
        js = torch.tensor(inside, device=logp.device)
        w = torch.tensor(windows, device=logp.device)
        toks = seqs[:, js]                                  # [K, J]
        seen = live[:, js]
        scores = torch.where(seen, logp[w[None, :].expand_as(toks), toks], 0.0).sum(-1)
        scores = scores / seen.sum(-1).clamp(min=1)  # mean: longer values are not penalised
        scores = torch.where(ok, scores, float("-inf"))
        if not bool(ok.any()):
            raise ValueError(f"{self.path}: no candidate matches the committed tokens")
        return int(scores.argmax())

    def resolve(self, committed: dict[int, int]) -> tuple[int, object] | None:
        """(token length, value) once a consistent candidate is fully committed, else None."""
        seqs, live = self._tables(torch.device("cpu"))
        ok = self.consistent(committed)
        have = torch.zeros(self.width, dtype=torch.bool)
        if committed:
            have[list(committed)] = True
        full = ok & ~(live & ~have[None, :]).any(-1)
        if not bool(full.any()):
            return None
        k = int(full.to(torch.int8).argmax())
        return self.lengths[k], self.values[k]

    def value(self, committed: dict[int, int]):
        ok = self.consistent(committed)
        if len(committed) < self.width or not bool(ok.any()):
            raise ValueError(f"{self.path}: slot not fully decoded")
        return self.values[int(ok.to(torch.int8).argmax())]


class Free:
    """Free string content or integer digits, decoded left to right inside the slot."""

    kind = "free"

    def __init__(self, vocab: Vocab, kind: str, terminator: int, path: str, *,
                 min_chars: int = 1, max_chars: int | None = None, max_tokens: int = 8,
                 lo=None, hi=None):
        self.vocab, self.type, self.terminator, self.path = vocab, kind, terminator, path
        self.min_chars, self.max_chars = min_chars, max_chars
        self.lo, self.hi = lo, hi
        self.max_tokens = INT_TOKENS if kind == "integer" else max_tokens
        self.width = self.max_tokens + 1
        clash = vocab.int_first[terminator] if kind == "integer" else vocab.safe[terminator]
        if clash:
            raise ValueError(f"{path}: the text after this value tokenizes into a token that "
                             "could also be part of the value")

    def body(self, committed: dict[int, int]) -> tuple[list[int], bool]:
        """(body tokens committed from the slot start, terminator seen)."""
        out = []
        for j in range(self.width):
            t = committed.get(j)
            if t is None:
                return out, False
            if t == self.terminator:
                return out, True
            out.append(t)
        return out, False

    def allowed(self, body: list[int], device: torch.device) -> torch.Tensor:
        """Bool [V]: tokens allowed at the next body position."""
        tables = self.vocab.tables(device)
        n = len(body)
        allow = torch.zeros(self.vocab.size, dtype=torch.bool, device=device)
        zero = self.type == "integer" and n >= 1 and self.vocab.decode(body) in ("0", "-0")
        if n < self.max_tokens and not zero:
            if self.type == "integer":
                allow = (tables["int_first"] if n == 0 else tables["digits"]).clone()
            else:
                allow = (tables["safe_first"] if n == 0 else tables["safe"]).clone()
                if self.max_chars is not None:
                    used = sum(self.vocab.chars[t] for t in body)
                    allow &= tables["chars"] <= self.max_chars - used
        chars = sum(self.vocab.chars[t] for t in body)
        if n >= self.max_tokens or (n >= 1 and (self.type == "integer" or chars >= self.min_chars)):
            allow[self.terminator] = True
        return allow

    def resolve(self, committed: dict[int, int]) -> tuple[int, object] | None:
        body, done = self.body(committed)
        return (len(body) + 1, self.value(committed)) if done else None

    def value(self, committed: dict[int, int]):
        body, done = self.body(committed)
        if not done:
            raise ValueError(f"{self.path}: slot not fully decoded")
        text = self.vocab.decode(body)
        if self.type == "integer":
            value = int(text)
            if self.lo is not None:
                value = max(value, int(-(-self.lo // 1)))
            if self.hi is not None:
                value = min(value, int(self.hi // 1))
            return value
        return text[: self.max_chars] if self.max_chars is not None else text
