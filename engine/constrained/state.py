"""One constrained request's decoding state: mode, the chosen layout, the host mirror of its answer.

Modes (plan.py picks the start mode from tool_choice / response_format):
  decide  tool_choice "auto": the first pass commits nothing; it reads the model's distribution
          at the answer's first position and calls iff the call opening (`<tool_call>`'s first
          token) is the model's most probable token there. Then -> text or call.
  text    an ordinary answer; the call opening is banned at the first position.
  call / json  the skeleton is decoded (below).

Laying the skeleton. The fixed text up to the first value slot is laid (and committed) at once;
each later piece of fixed text is laid the moment the value before it is decoded, right behind
the value's own tokens. So the canvas is exactly the wire text the model was trained on (no
padding), masks appear only in the value slot being decoded, and everything behind it waits
(blocked masks) until its position is known. Slots are decoded one after another, each under
its slot rule (slots.py); with several tools the name slot (shared by every tool's layout) comes
first and picks the layout for the rest. The answer's length becomes exact when the last piece
(with EOS) is laid; until then the canvas reserves the plan's longest answer.
The mirror holds every committed answer token the host has seen (window tokens after each pass).
"""

from __future__ import annotations

import dataclasses
import json

import torch

from diffvoice.engine.constrained.layout import Layout


def segments(layout: Layout) -> tuple[list[tuple[list[int], object]], list[int]]:
    """[(fixed ids before slot i, slot i)], tail ids (incl. EOS) of a static layout."""
    out, r, run = [], 0, []
    starts = dict(layout.slots)
    while r < layout.length:
        if r in starts:
            out.append((run, starts[r]))
            run = []
            r += starts[r].width
        else:
            run.append(layout.fixed[r])
            r += 1
    return out, run


class ConstrainedState:
    def __init__(self, plan, mode: str, tool: str | None = None):
        self.plan = plan
        self.mode = mode
        self.tool = tool
        self.layout: Layout | None = None
        self.mirror: dict[int, int] = {}
        self.pending: str | None = None   # decision taken in the pass that just ran
        self.decision_prob: float | None = None  # p(call opening) in the decide pass
        self.segs: list = []
        self.tail: list[int] = []
        self.current = 0                  # index of the slot being decoded
        self.start = 0                    # its relative start position
        self.values: list = []            # decoded slot values, in order
        self.done = False                 # the whole skeleton is laid
        if mode in ("call", "json"):
            self._choose_layout(plan.layouts[tool or plan.names[0]] if mode == "call"
                                else plan.json_layout)

    @property
    def structured(self) -> bool:
        return self.mode in ("call", "json")

    def _choose_layout(self, layout: Layout) -> None:
        self.layout = layout
        self.segs, self.tail = segments(layout)

    # ------------------------------------------------------------------ canvas writes
    def _write(self, runner, seq, at: int, ids: list[int]) -> int:
        """Lay `ids` at relative `at`; everything behind them stays masked; -> end position."""
        row = runner.seq[seq.slot]
        p0 = seq.prompt_len
        end = at + len(ids)
        if ids:
            row[p0 + at: p0 + end] = torch.tensor(ids, dtype=torch.long)
        for r in [r for r in self.mirror if r >= at]:
            del self.mirror[r]
        for i, t in enumerate(ids):
            self.mirror[at + i] = t
        old_end = seq.canvas_end
        if self.done:  # exact length: EOS was the last id laid
            seq.params = dataclasses.replace(seq.params, max_new_tokens=end)
        else:  # room for the longest answer; the rest is masked until its place is known
            seq.params = dataclasses.replace(seq.params, max_new_tokens=max(
                seq.params.max_new_tokens, self.plan.max_length))
            row[p0 + end: seq.gen_end] = runner.mask_id
        row[seq.gen_end: max(old_end, seq.canvas_end)] = int(runner.eos_ids[0])
        return end

    def _lay_next(self, runner, seq, at: int) -> None:
        """Lay the fixed text before slot `self.current` (or the tail) at relative `at`."""
        if self.current >= len(self.segs):
            self.done = True
            self._write(runner, seq, at, self.tail)
            return
        ids, slot = self.segs[self.current]
        self.start = at + len(ids)
        self._write(runner, seq, at, ids)
        self._advance(runner, seq)  # a slot with nothing to decode resolves at once

    def _advance(self, runner, seq) -> None:
        slot, s = self.segs[self.current][1], self.start
        resolved = slot.resolve(self._committed(slot, s))
        if resolved is None:
            return
        length, value = resolved
        self.values.append(value)
        if self.mode == "call" and self.current == 0 and self.tool is None:
            self.tool = value  # the name slot picks the layout for the arguments
            self._choose_layout(self.plan.layouts[value])
        self.current += 1
        self._lay_next(runner, seq, s + length)

    def on_admit(self, runner, seq) -> None:
        if self.layout is not None:
            self._lay_next(runner, seq, 0)

    # ------------------------------------------------------------------ per pass
    def rules(self, rel: list[int], cur: list[int], mask_id: int, logits: torch.Tensor):
        """-> (forced {w: token}, allowed {w: bool[V]}, banned {w: token}, blocked set(w))."""
        forced, allowed, banned, blocked = {}, {}, {}, set()
        masked = {r: w for w, r in enumerate(rel) if r >= 0 and cur[w] == mask_id}
        if self.mode == "decide":
            if 0 not in masked:  # cannot happen with a fresh canvas; never wait forever
                self.pending = "text"
            else:
                probs = torch.softmax(logits[masked[0]].float(), -1)
                probs[mask_id] = 0.0
                self.decision_prob = float(probs[self.plan.open_id])
                self.pending = "call" if int(probs.argmax()) == self.plan.open_id else "text"
            return forced, allowed, banned, set(masked.values())
        if self.mode == "text":
            if 0 in masked:
                banned[masked[0]] = self.plan.open_id
            return forced, allowed, banned, blocked
        active = set()
        if not self.done:
            slot, s = self.segs[self.current][1], self.start
            committed = self._committed(slot, s)
            if slot.kind == "choice":
                inside = [j for j in range(slot.width) if s + j in masked]
                if inside:
                    logp = torch.log_softmax(logits.float(), -1)
                    best = slot.best(committed, inside, [masked[s + j] for j in inside], logp)
                    for j in inside:
                        if j < slot.lengths[best]:
                            forced[masked[s + j]] = slot.seqs[best][j]
                            active.add(s + j)
            else:
                body, _ = slot.body(committed)
                j = len(body)
                if s + j in masked:
                    allowed[masked[s + j]] = slot.allowed(body, logits.device)
                    active.add(s + j)
        blocked = {w for r, w in masked.items() if r not in active}
        return forced, allowed, banned, blocked

    def _committed(self, slot, s: int) -> dict[int, int]:
        return {j: self.mirror[s + j] for j in range(slot.width) if s + j in self.mirror}

    def observe(self, runner, seq, rel: list[int], tokens: list[int]) -> None:
        """After a pass: update the mirror; act on a decision; lay what follows a decoded
        value."""
        mask_id = runner.mask_id
        for r, t in zip(rel, tokens, strict=True):
            if r >= 0 and t != mask_id:
                self.mirror[r] = t
        if self.mode == "decide":
            if self.pending is None:
                return
            decision, self.pending = self.pending, None
            self.mirror.clear()
            if decision == "text":
                self.mode = "text"
                return
            self.mode = "call"
            self.tool = self.plan.forced_tool or (
                self.plan.names[0] if len(self.plan.names) == 1 else None)
            self._choose_layout(self.plan.layouts[self.tool or self.plan.names[0]])
            self._lay_next(runner, seq, 0)
            return
        if self.structured and not self.done:
            self._advance(runner, seq)

    # ------------------------------------------------------------------ result
    def value(self):
        """The decoded value tree (call: {"name", "arguments"} dict; json: the value)."""
        if not self.done:
            raise ValueError("the constrained answer is not complete")

        def build(node):
            kind = node[0]
            if kind == "slot":
                return self.values[node[1]]
            if kind == "object":
                return {k: build(v) for k, v in node[1].items()}
            raise ValueError(f"bad template node {kind!r}")

        template = self.layout.template
        if template[0] == "call":
            return {"name": self.values[template[1]], "arguments": build(template[2])}
        return build(template)

    def tool_call(self) -> dict:
        value = self.value()
        return {"name": value["name"],
                "arguments": json.dumps(value["arguments"], ensure_ascii=False)}
