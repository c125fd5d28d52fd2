"""One constrained request's decoding state: mode, active layout, host mirror of its answer.

Modes (see plan.py for how tool_choice / response_format pick the start mode):
  decide  tool_choice "auto": the first pass commits nothing; it reads the model's distribution
          at the answer's first position and calls iff the call opening (`<tool_call>`'s first
          token) is the model's most probable token there. Then -> text, name or call.
  text    an ordinary answer; the call opening is banned at the first position.
  name    the call header and the tool-name slot are laid; the rest waits (blocked) until the
          name is decoded, then the chosen tool's layout is laid -> call.
  call / json  the whole layout is laid; only slots are decoded.
The mirror holds every committed answer token the host has seen (window tokens after each pass),
which is all the slot rules need. Knows tensors only through the runner's canvas row.
"""

from __future__ import annotations

import dataclasses
import json

import torch

from engine.constrained.layout import Layout


class ConstrainedState:
    def __init__(self, plan, mode: str, tool: str | None = None):
        self.plan = plan
        self.mode = mode
        self.tool = tool
        self.layout: Layout | None = None
        self.laid_until = 0        # relative positions below this follow self.layout
        self.mirror: dict[int, int] = {}
        self.pending: str | None = None   # decision taken in the pass that just ran
        self.decision_prob: float | None = None  # p(call opening) in the decide pass
        if mode in ("call", "json"):
            self.layout = plan.layouts[tool] if mode == "call" else plan.json_layout
            self.laid_until = self.layout.length
        elif mode == "name":
            self.layout = plan.layouts[plan.names[0]]
            self.laid_until = plan.name_end

    @property
    def structured(self) -> bool:
        return self.mode in ("name", "call", "json")

    # ------------------------------------------------------------------ canvas writes
    def lay(self, runner, seq, start: int, end: int) -> None:
        """Write layout positions [start, end): fixed tokens, masks in slots; and the length."""
        row = runner.seq[seq.slot]
        p0 = seq.prompt_len
        ids = [self.layout.fixed.get(r, runner.mask_id) for r in range(start, end)]
        row[p0 + start: p0 + end] = torch.tensor(ids, dtype=torch.long)
        old_end = seq.canvas_end
        if end == self.layout.length:  # the whole call is known: EOS behind it, exact length
            seq.params = dataclasses.replace(seq.params, max_new_tokens=self.layout.length)
        else:  # name phase: room for the longest call, the rest stays masked (blocked)
            seq.params = dataclasses.replace(seq.params, max_new_tokens=self.plan.max_length)
            row[p0 + end: seq.gen_end] = runner.mask_id
        row[seq.gen_end: max(old_end, seq.canvas_end)] = int(runner.eos_ids[0])
        for r in range(start, end):
            self.mirror.pop(r, None)
            if r in self.layout.fixed:
                self.mirror[r] = self.layout.fixed[r]

    def on_admit(self, runner, seq) -> None:
        if self.layout is not None:
            self.lay(runner, seq, 0, self.laid_until)

    # ------------------------------------------------------------------ per pass
    def rules(self, rel: list[int], cur: list[int], mask_id: int, logits: torch.Tensor):
        """-> (forced {w: token}, allowed {w: bool[V]}, banned {w: token}, blocked set(w))."""
        forced, allowed, banned, blocked = {}, {}, {}, set()
        masked = {r: w for w, r in enumerate(rel) if r >= 0 and cur[w] == mask_id}
        if self.mode == "decide":
            if 0 not in masked:  # cannot happen with a fresh canvas; never wait forever
                self.pending = "text"
            elif 0 in masked:
                probs = torch.softmax(logits[masked[0]].float(), -1)
                probs[mask_id] = 0.0
                top = int(probs.argmax())
                self.decision_prob = float(probs[self.plan.open_id])
                self.pending = "call" if top == self.plan.open_id else "text"
            return forced, allowed, banned, set(masked.values())
        if self.mode == "text":
            if 0 in masked:
                banned[masked[0]] = self.plan.open_id
            return forced, allowed, banned, blocked
        logp = None
        for start, slot in self.layout.slots:
            if start >= self.laid_until:
                break
            inside = [j for j in range(slot.width) if start + j in masked]
            if not inside:
                continue
            committed = {j: self.mirror[start + j] for j in range(slot.width)
                         if start + j in self.mirror}
            if slot.kind == "choice":
                if logp is None:
                    logp = torch.log_softmax(logits.float(), -1)
                best = slot.best(committed, inside, [masked[start + j] for j in inside], logp)
                for j in inside:
                    forced[masked[start + j]] = slot.seqs[best][j]
            else:
                body, done = slot.body(committed)
                for j in inside:
                    w = masked[start + j]
                    if done:
                        forced[w] = self.plan.vocab.pad
                    elif j == len(body):
                        allowed[w] = slot.allowed(body, logits.device)
                    else:
                        blocked.add(w)
        for r, w in masked.items():  # beyond the laid part (name phase): wait
            if r >= self.laid_until:
                blocked.add(w)
        return forced, allowed, banned, blocked

    def observe(self, runner, seq, rel: list[int], tokens: list[int]) -> None:
        """After a pass: update the mirror; act on a decision or a decoded tool name."""
        mask_id = runner.mask_id
        for r, t in zip(rel, tokens, strict=True):
            if r >= 0 and t != mask_id and (self.layout is None or r < self.layout.length):
                self.mirror[r] = t
        if self.mode == "decide" and self.pending is not None:
            decision, self.pending = self.pending, None
            if decision == "text":
                self.mode = "text"
                self.mirror.clear()
                return
            self.mirror.clear()
            if self.plan.forced_tool is not None or len(self.plan.names) == 1:
                self.tool = self.plan.forced_tool or self.plan.names[0]
                self.mode, self.layout = "call", self.plan.layouts[self.tool]
                self.laid_until = self.layout.length
            else:
                self.mode, self.layout = "name", self.plan.layouts[self.plan.names[0]]
                self.laid_until = self.plan.name_end
            self.lay(runner, seq, 0, self.laid_until)
            return
        if self.mode == "name":
            start, slot = self.layout.slots[0]
            committed = {j: self.mirror[start + j] for j in range(slot.width)
                         if start + j in self.mirror}
            if len(committed) == slot.width:
                self.tool = slot.value(committed)
                self.mode, self.layout = "call", self.plan.layouts[self.tool]
                old = self.laid_until
                self.laid_until = self.layout.length
                self.lay(runner, seq, old, self.laid_until)

    # ------------------------------------------------------------------ result
    def value(self):
        """The decoded value tree (call: {"name", "arguments"} dict; json: the value)."""
        slots = self.layout.slots

        def slot_value(i: int):
            start, slot = slots[i]
            committed = {j: self.mirror[start + j] for j in range(slot.width)
                         if start + j in self.mirror}
            return slot.value(committed)

        def build(node):
            kind = node[0]
            if kind == "slot":
                return slot_value(node[1])
            if kind == "object":
                return {k: build(v) for k, v in node[1].items()}
            raise ValueError(f"bad template node {kind!r}")

        template = self.layout.template
        if template[0] == "call":
            return {"name": slot_value(template[1]), "arguments": build(template[2])}
        return build(template)

    def tool_call(self) -> dict:
        value = self.value()
        return {"name": value["name"],
                "arguments": json.dumps(value["arguments"], ensure_ascii=False)}
