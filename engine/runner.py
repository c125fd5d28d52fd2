"""Model runner: turns the scheduled rows into batch tensors, runs one denoising pass, applies the
unmasking policies and writes committed tokens back - all on the device.

Device state it owns: the token canvas of every slot `seq` [S, T + 1] and the per-layer K/V
pools [S, Hkv, T + 1, D] (position T is a trash column for padded writes). Per pass the host
learns only the query-window tokens and how many masks remain in each row's decode block: one
small device-to-host copy (pinned + event on CUDA), never a sync inside the policy.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffvoice.engine.constrained.hook import after_pass, constrain_pass
from diffvoice.engine.cuda_graphs import StaticForward
from diffvoice.engine.loader import LoadedModel
from diffvoice.engine.params import EngineConfig
from diffvoice.engine.policies import NEEDS_ENTROPY, PolicyKnobs, commit_mixed
from diffvoice.engine.rowbatch import FLOAT as FC
from diffvoice.engine.rowbatch import INT as IC
from diffvoice.engine.rowbatch import pack
from diffvoice.engine.sampling import predict
from diffvoice.engine.sequence import Sequence


@dataclass
class StepOutput:
    window_start: list[int]  # absolute position of window slot 0, per row
    tokens: list[list[int]]  # window tokens after this pass, per row
    remaining: list[int]  # masks left in each row's decode block
    min_conf: list[float] | None = None  # lowest confidence among this pass's commits, per row


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: EngineConfig, device: torch.device,
                 max_seq_len: int):
        self.model = loaded.model
        self.mc = loaded.config
        self.device = device
        self.T = max_seq_len
        self.mask_id = int(self.mc.mask_token_id)
        self.eos_ids = torch.tensor(self.mc.eos_token_ids, device=device)
        self.shift = int(self.mc.logit_shift)
        slots = config.max_running
        dtype = next(self.model.parameters()).dtype
        shape = (slots, self.mc.num_kv_heads, self.T + 1, self.mc.head_dim)
        self.kv = [(torch.zeros(shape, dtype=dtype, device=device),
                    torch.zeros(shape, dtype=dtype, device=device))
                   for _ in range(self.mc.num_layers)]
        self.seq = torch.full((slots, self.T + 1), self.mask_id, dtype=torch.long, device=device)
        self.arange = torch.arange(self.T + 1, device=device)
        self.generators: dict[int, torch.Generator] = {}
        self.pinned = device.type == "cuda"
        graphs = device.type == "cuda" and not config.enforce_eager
        self.static = None
        if self.mc.block_causal and (graphs or config.static_shapes):
            self.static = StaticForward(self.model, self.kv, config.batch_buckets, self.T, device,
                                        capture=graphs)

    def admit(self, s: Sequence) -> None:
        """Lay out the slot's canvas: prompt, masks to gen_end, then (fast decoding) EOS padding
        to the canvas end."""
        row = self.seq[s.slot]
        row.fill_(self.mask_id)
        row[: s.prompt_len] = torch.tensor(s.prompt_ids, dtype=torch.long)
        if s.rules.eos_fill:  # reference decoding keeps masks there, as the authors' loops do
            row[s.gen_end: s.canvas_end] = int(self.mc.eos_token_ids[0])
        if s.params.temperature > 0:
            g = torch.Generator(device=self.device)
            g.manual_seed(s.params.seed if s.params.seed is not None
                          else int(torch.randint(0, 2**62, (1,)).item()))
            self.generators[s.slot] = g
        if s.constraint is not None:  # tool call / JSON skeleton laid up front
            s.constraint.on_admit(self, s)

    def release(self, s: Sequence) -> None:
        self.generators.pop(s.slot, None)

    @torch.inference_mode()
    def step(self, rows: list[Sequence]) -> StepOutput:
        dev, shift = self.device, self.shift
        W = max(r.q_end - r.q_start for r in rows)
        L = max(max(r.q_end - r.first_computed for r in rows), W + shift)
        ints, floats, host = pack(rows, dev)  # host-side geometry: one tensor each
        columns = ints.unbind(1)  # one op for every column view
        c = lambda name: columns[IC[name]]  # noqa: E731
        slots, q_end, first, visible = c("slot"), c("q_end"), c("first"), c("visible")
        positions = q_end[:, None] - L + self.arange[:L][None]  # [B, L]
        valid = positions >= first[:, None]
        key_valid = valid & (positions >= visible[:, None])
        write_pos = None
        if any(h[IC["writes"]] for h in host):
            store = key_valid & c("writes").bool()[:, None] & (positions < c("q_start")[:, None])
            write_pos = torch.where(store, positions, self.T)
        gather_pos = torch.where(valid, positions, self.T)
        ids = self.seq[slots[:, None], gather_pos]  # [B, L]
        cache_len_max = max(h[IC["visible"]] for h in host)
        logits = None
        if self.static is not None and write_pos is None:  # decode-only: fixed shapes
            logits = self.static(ids, positions.clamp(min=0), key_valid, slots, visible,
                                 cache_len_max, L - W - shift)
        if logits is None:
            logits = self.model.forward_step(ids, positions.clamp(min=0), key_valid, self.kv,
                                             slots, visible, cache_len_max, write_pos,
                                             L - W - shift)
        logits = logits[:, :W]  # [B, W, V]

        wpos = positions[:, L - W:]  # [B, W] absolute position of each window slot
        cur = ids[:, L - W:]
        d_start, d_end = c("d_start")[:, None], c("d_end")[:, None]
        in_block = (wpos >= d_start) & (wpos < d_end)
        maskable = (cur == self.mask_id) & in_block
        # schema-constrained rows (tool calls, response_format): logit masks, blocked commits
        logits, maskable = constrain_pass(rows, logits, wpos, cur, maskable, self.mask_id)
        names = sorted({r.params.policy or "low_confidence" for r in rows})
        full_vocab = c("full_vocab").bool() if any(h[IC["full_vocab"]] for h in host) else None
        pred, conf, entropy = predict(
            logits, self.mask_id, [r.params.temperature for r in rows],
            [self.generators.get(r.slot) for r in rows],
            need_entropy=bool(NEEDS_ENTROPY.intersection(names)), full_vocab=full_vocab)
        knobs = PolicyKnobs(
            steps_left=c("steps_left"), threshold=floats[:, FC["threshold"]],
            entropy_bound=floats[:, FC["entropy_bound"]], k_fixed=c("k_fixed"),
            k_host=[h[IC["k_fixed"]] for h in host],
            block=(wpos >= c("block_start")[:, None]) & (wpos < d_end),
            dream_f=floats[:, FC["dream_f"]])
        commit = commit_mixed(names, c("policy"), conf, entropy, maskable, knobs)
        if any(h[IC["first_token"]] for h in host):  # v2: a new block's slot 0 alone, from the
            slot0 = maskable & (wpos == d_start)  # previous block's last logit
            commit = torch.where(c("first_token").bool()[:, None], slot0, commit)
        new = torch.where(commit, pred, cur)
        stop_rows = c("stop").bool()[:, None]
        prompt_len = c("prompt_len")[:, None]
        is_eos = torch.isin(new, self.eos_ids) & (wpos >= prompt_len) & stop_rows
        if any(h[IC["eos_fill"]] for h in host):
            # fast decoding: after a committed EOS nothing more is generated; fill the masks
            # behind it with EOS
            after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
            fill = after_eos & (new == self.mask_id) & c("eos_fill").bool()[:, None]
            new = torch.where(fill, self.eos_ids[0], new)
        in_window = wpos >= first[:, None]
        self.seq[slots[:, None], torch.where(in_window, wpos, self.T)] = new
        # masks that still decide the answer: with final commits, none past max_new_tokens or
        # behind the first EOS (those slots can no longer change any token before them)
        counted = in_block
        if any(h[IC["final"]] for h in host):
            before_eos = is_eos.long().cumsum(-1) == 0
            early = (wpos < c("gen_end")[:, None]) & before_eos
            counted = in_block & (early | ~c("final").bool()[:, None])
        remaining = ((new == self.mask_id) & counted).sum(-1)
        # the lowest committed confidence per row rides along in the same copy (micro-units)
        low = (torch.where(commit, conf, torch.ones_like(conf)).amin(-1) * 1e6).long()
        out = self._to_host(torch.cat((new, remaining[:, None], low[:, None]), dim=1))
        step = StepOutput(window_start=[r.q_end - W for r in rows],
                          tokens=[h[:-2] for h in out], remaining=[h[-2] for h in out],
                          min_conf=[h[-1] / 1e6 for h in out])
        after_pass(self, rows, step.window_start, step.tokens)  # may lay more of a call's skeleton
        return step

    def _to_host(self, t: torch.Tensor) -> list[list[int]]:
        if not self.pinned:
            return t.tolist()
        buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
        buf.copy_(t, non_blocking=True)
        done = torch.cuda.Event()
        done.record()
        done.synchronize()  # the one host wait per pass, after the whole pass was queued
        return buf.tolist()
