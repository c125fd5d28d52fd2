"""Model runner: turns the scheduled rows into batch tensors, runs one denoising pass, applies the
unmasking policies and writes committed tokens back - all on the device.

Device state it owns: the token canvas of every slot `seq` [S, T + 1] and the per-layer K/V
pools [S, Hkv, T + 1, D] (position T is a trash column for padded writes). The host learns only
the query-window tokens and how many masks remain in each row's decode block: one small
device-to-host copy (pinned + event on CUDA) after a pass, or after the last pass of a block
step (engine.block_step), whose other passes read nothing. That read may be started and
collected later (`step(..., wait=False)`, `collect`): with EngineConfig.overlap the engine queues
the next step first. Every pass runs the model through
`ModelRunner._forward`, the one place that picks a fixed shape (CUDA graph / static_shapes) or
eager; both run DiffusionLM.forward_step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from diffvoice.engine.block_step import masks_after, masks_bound
from diffvoice.engine.constrained.hook import after_pass, constrain_pass
from diffvoice.engine.cuda_graphs import StaticForward
from diffvoice.engine.loader import LoadedModel
from diffvoice.engine.params import EngineConfig
from diffvoice.engine.pass_plan import PlanCache
from diffvoice.engine.plan_types import to_device
from diffvoice.engine.policies import NEEDS_ENTROPY, PolicyKnobs, commit_mixed
from diffvoice.engine.rowbatch import row_key, row_pass
from diffvoice.engine.sampling import predict
from diffvoice.engine.sequence import Sequence

# EngineConfig.predict_masked from this batch size up: a lone row's pass costs its ops, not its
# rows, so picking slots only adds work there (docs/perf.md, "Prediction over the committable
# slots", docs/perf-cpu-predict/same_pass.txt: 1.003-1.078x the whole window's time at batch
# 1; 0.84-0.97x at batch 4 and 16 for the receptionist and the 10M model)
MASKED_MIN_BATCH = 2


@dataclass
class StepOutput:
    window_start: list[int]  # absolute position of window slot 0, per row
    tokens: list[list[int]]  # window tokens after this pass, per row
    remaining: list[int]  # masks left in each row's decode block
    min_conf: list[float] | None = None  # lowest confidence among this pass's commits, per row
    # rows whose own request-specific work (a schema constraint) raised this pass: row index ->
    # exception. They committed nothing; the engine fails them alone (engine.constrained.hook)
    failed: dict[int, BaseException] = field(default_factory=dict)
    idle: list[int] | None = None  # a block step's passes each row sat out (its block was done)


@dataclass
class PendingRead:
    """A block step's read, started (ModelRunner.step with wait=False), for ModelRunner.collect."""

    rows: list[Sequence]
    window_start: list[int]
    width: int  # window slots W
    data: torch.Tensor  # [B, W + 1 (+ 1 low) (+ 1 idle)]: pinned host memory on CUDA
    done: object | None  # torch.cuda.Event recorded after the copy (None on a CPU)
    has_low: bool
    has_idle: bool
    faults: dict


@dataclass
class BlockStep:
    """Device state carried across the passes of one block step (ModelRunner.step)."""

    passes: int
    index: int = 0  # passes run so far
    done: torch.Tensor | None = None  # [B] bool: the row's decode block has no mask left
    idle: torch.Tensor | None = None  # [B] long: passes the row sat out
    low: torch.Tensor | None = None  # [B] f32: lowest confidence committed (first blocks)
    # per row, the most maskable slots its next pass can see (engine.block_step.masks_bound);
    # None: some row has no such bound, every pass predicts the whole window
    bound: list[int] | None = None


class ModelRunner:
    def __init__(self, loaded: LoadedModel, config: EngineConfig, device: torch.device,
                 max_seq_len: int):
        self.model = loaded.model
        self.mc = loaded.config
        self.device = device
        self.T = max_seq_len
        self.mask_id = int(self.mc.mask_token_id)
        self.eos_ids = torch.tensor(self.mc.eos_token_ids, device=device)
        ids = self.mc.eos_token_ids
        self.eos_one = int(ids[0]) if len(set(ids)) == 1 else None  # one id: == beats isin
        self.shift = int(self.mc.logit_shift)
        self.eos_set = tuple(sorted(set(ids)))
        self._views: dict[tuple[int, int, int], torch.Tensor] = {}
        self.slots = slots = config.max_running
        dtype = next(self.model.parameters()).dtype
        shape = (slots, self.mc.num_kv_heads, self.T + 1, self.mc.head_dim)
        self.kv = [(torch.zeros(shape, dtype=dtype, device=device),
                    torch.zeros(shape, dtype=dtype, device=device))
                   for _ in range(self.mc.num_layers)]
        self.seq = torch.full((slots, self.T + 1), self.mask_id, dtype=torch.long, device=device)
        self.generators: dict[int, torch.Generator] = {}
        self.pinned = device.type == "cuda"
        self.predict_masked = config.predict_masked
        graphs = device.type == "cuda" and not config.enforce_eager
        self.plans = PlanCache(self.model, self.kv, device, self.T, self.mask_id, self.shift)
        if not self.plans.torch_attention:  # the Triton path reads rotary tables by position
            self.model.rope_tables(device, self.T + 1)
        self.static = None
        if self.mc.block_causal and (graphs or config.static_shapes):
            self.static = StaticForward(self.model, self.kv, config.batch_buckets, self.T, device,
                                        capture=graphs)

    def prepare_graphs(self, block: int, context: int) -> list[tuple]:
        """Capture (CUDA) or lay out (static_shapes) the passes of `block`-token windows ahead of
        serving: decode-only and fused commit (see engine.cuda_graphs); see
        EngineConfig.warmup_graph_context. Returns the new shape keys."""
        if self.static is None or context <= 0:
            return []
        commit = self.static.max_write_length(block)
        return self.static.prepare([(block + self.shift, 0, False),
                                    (commit, commit - block - self.shift, True)],
                                   self.slots, context)

    def admit(self, s: Sequence) -> None:
        """Lay out the slot's canvas: prompt, masks to gen_end, then (fast decoding) EOS padding
        to the canvas end."""
        row = self.seq[s.slot]
        row.fill_(self.mask_id)
        row[: s.prompt_len] = to_device(s.prompt_ids, torch.long, self.device)
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

    def begin_block_step(self, rows: list[Sequence], passes: int) -> BlockStep:
        """Device state for `passes` passes of `rows` run back to back without a host read
        (Engine.step_rows). Only what the step needs is made: nothing to sit out in a one-pass
        step, no confidence to track once every row's first block is out."""
        b = len(rows)
        step = BlockStep(passes=passes)
        if passes > 1:
            step.done = torch.zeros(b, dtype=torch.bool, device=self.device)
            step.idle = torch.zeros(b, dtype=torch.long, device=self.device)
        if any(r.t_first_block is None for r in rows):
            step.low = torch.ones(b, device=self.device)
        if self.predict_masked and b >= MASKED_MIN_BATCH:
            bound = [masks_bound(r) for r in rows]
            step.bound = None if None in bound else bound
        return step

    @torch.inference_mode()
    def step(self, rows: list[Sequence], block: BlockStep | None = None,
             read: bool = True, wait: bool = True):
        """One denoising pass of `rows`, a pass of the block step `block` (several passes of
        the same rows back to back; None: a step of this one pass). A row whose decode block has
        no mask left stays as it is for the step's remaining passes (the host would have ended
        its block there); with `read=False` nothing is read back: the pass is only queued
        (returns None). The step's last pass reads the windows once (-> StepOutput); with
        `wait=False` that read is only started (-> a PendingRead for `collect`: the host may
        plan and queue the next step meanwhile)."""
        if block is None:
            block = self.begin_block_step(rows, 1)
        keys = tuple(row_key(r) for r in rows)
        plan = self.plans.get(keys)  # device geometry, built once per distinct geometry
        W, L = plan.W, plan.L
        if plan.ids_view is not None:  # one row without padding: a slice of its canvas
            ids = self._view(self.seq, plan.ids_view, row=True)
        else:
            ids = self.seq[plan.slot_col, plan.gather_pos]  # [B, L]
        wpos = plan.wpos  # [B, W] absolute position of each window slot
        cur = ids[:, L - W:]
        maskable = (cur == self.mask_id) & plan.in_block
        select = None  # [B, K]: the window slots predicted, all the maskable ones among them
        if block.bound is not None:
            k = max(1, max(block.bound))
            if k < W:
                select = maskable.to(torch.uint8).topk(k, dim=-1, sorted=False).indices
            block.bound = [masks_after(r, m) for r, m in zip(rows, block.bound, strict=True)]
        logits, select = self._forward(ids, plan, select)  # [B, W or K, V]

        # schema-constrained rows (tool calls, response_format): logit masks, blocked commits
        faults: dict[int, BaseException] = {}
        logits, maskable = constrain_pass(rows, logits, wpos, cur, maskable, self.mask_id,
                                          faults)
        names = plan.names
        pred, conf, entropy = predict(
            logits, self.mask_id, [r.params.temperature for r in rows],
            [self.generators.get(r.slot) for r in rows],
            need_entropy=bool(NEEDS_ENTROPY.intersection(names)), full_vocab=plan.full_vocab,
            full_vocab_all=plan.full_vocab_all)
        if select is not None:  # back to window slots; the others are not maskable
            pred = cur.scatter(1, select, pred)
            conf = torch.zeros(cur.shape, dtype=conf.dtype, device=conf.device).scatter_(
                1, select, conf)
            if entropy is not None:
                entropy = torch.zeros_like(conf).scatter_(1, select, entropy)
        if plan.first_token_rows is not None and len(rows) == 1:  # the one row's policy
            commit = maskable & plan.slot0  # does not decide this pass (see below)
        else:
            commit = commit_mixed(names, plan.policy_ids, conf, entropy, maskable,
                                  self._knobs(rows, keys, plan))
        if plan.first_token_rows is not None and len(rows) > 1:  # v2: a new block's slot 0
            slot0 = maskable & plan.slot0  # alone, from the previous block's last logit
            commit = torch.where(plan.first_token_rows, slot0, commit)
        new = torch.where(commit, pred, cur)
        counted = plan.counted
        if plan.eos_zone is not None:  # some row stops at EOS
            is_eos = (new == self.eos_one if self.eos_one is not None
                      else torch.isin(new, self.eos_ids)) & plan.eos_zone
            if plan.eos_fill_rows is not None:
                # fast decoding: after a committed EOS nothing more is generated; fill the
                # masks behind it with EOS
                after_eos = (is_eos.long().cumsum(-1) - is_eos.long()) > 0
                fill = after_eos & (new == self.mask_id) & plan.eos_fill_rows
                new = torch.where(fill, self.eos_ids[0], new)
            if plan.early is not None:
                # masks that still decide the answer: with final commits, none past
                # max_new_tokens or behind the first EOS (those slots can no longer change any
                # token before them)
                before_eos = is_eos.cumsum(-1) == 0
                counted = ((plan.early & before_eos) | plan.not_final) & plan.in_block
        if block.index > 0:  # rows whose block ended in an earlier pass of this step
            new = torch.where(block.done[:, None], cur, new)
            commit = commit & ~block.done[:, None]
        if plan.window_write is not None:
            slot, lo, hi = plan.window_write
            self.seq[slot, lo:hi] = new[0]
        else:
            self.seq[plan.slot_col, plan.window_idx] = new
        remaining = ((new == self.mask_id) & counted).sum(-1)
        if block.low is not None:
            block.low = torch.minimum(block.low, conf.masked_fill(~commit, 1.0).amin(-1))
        if block.index > 0:
            block.idle += block.done
        if block.index < block.passes - 1:
            block.done |= remaining == 0
        block.index += 1
        if not read:  # (constrained rows, whose work may fault, are read every pass)
            return None
        pending = self._start_read(rows, plan, new, remaining, block, faults)
        return self.collect(pending) if wait else pending

    def _start_read(self, rows, plan, new, remaining, block: BlockStep,
                    faults: dict) -> PendingRead:
        """The one read of a block step, queued: the window, the masks left, the lowest
        committed confidence over the step's passes and how many of them each row sat out, as
        one tensor copied to pinned memory behind an event (CUDA; on a CPU it is computed)."""
        parts = [new, remaining[:, None]]
        if block.low is not None:
            parts.append((block.low * 1e6).long()[:, None])
        if block.idle is not None:
            parts.append(block.idle[:, None])
        t = torch.cat(parts, dim=1)
        done = None
        if self.pinned:
            buf = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
            buf.copy_(t, non_blocking=True)
            done = torch.cuda.Event()
            done.record()
            t = buf
        return PendingRead(rows, plan.window_start, new.shape[1], t, done, block.low is not None,
                           block.idle is not None, faults)

    def collect(self, pending: PendingRead) -> StepOutput:
        """Wait for a started read (the one host wait of a block step) -> its StepOutput."""
        if pending.done is not None:
            pending.done.synchronize()
        out, W = pending.data.tolist(), pending.width
        step = StepOutput(window_start=pending.window_start, tokens=[h[:W] for h in out],
                          remaining=[h[W] for h in out], failed=pending.faults,
                          idle=[h[-1] for h in out] if pending.has_idle else [0] * len(out))
        if pending.has_low:
            step.min_conf = [h[W + 1] / 1e6 for h in out]
        after_pass(self, pending.rows, step.window_start, step.tokens, pending.faults)
        return step

    def _forward(self, ids: torch.Tensor, plan, select: torch.Tensor | None = None):
        """The pass's window logits; the one place that chooses how the model runs. A fixed
        shape where one fits (engine.cuda_graphs: a CUDA graph replayed, or with static_shapes
        on the CPU the same padded call run eagerly), else eager with the pass's AttnPlan. Both
        end in DiffusionLM.forward_step. -> (logits, select): [B, K, V] for the window slots
        `select` [B, K] (eager only), else [B, W, V] and None."""
        static = self.static
        if static is not None and (plan.write_pos is None
                                   or plan.L <= static.max_write_length(plan.W)):
            logits = static(ids, plan.positions, plan.key_valid, plan.slots, plan.visible,
                            plan.cache_len_max, plan.logits_start, plan.write_pos)
            if logits is not None:
                return logits[:, :plan.W], None
        logits = self.model.forward_step(ids, plan.positions, plan.key_valid, self.kv,
                                         plan.slots, plan.visible, plan.cache_len_max,
                                         plan.write_pos, plan.logits_start, plan=plan.attn,
                                         select=select)
        return (logits, select) if select is not None else (logits[:, :plan.W], None)

    def _view(self, t: torch.Tensor, where: tuple[int, int, int], row: bool = False):
        """t[slot, lo:hi] ([1, hi - lo] with `row`): a view, made once per distinct slice."""
        key = (*where, row)
        view = self._views.get(key)
        if view is None:
            if len(self._views) >= 4096:
                self._views.clear()
            slot, lo, hi = where
            view = self._views[key] = t[slot:slot + 1, lo:hi] if row else t[slot, lo:hi]
        return view

    def _knobs(self, rows: list[Sequence], keys, plan) -> PolicyKnobs:
        """The policies' per-pass schedule as small device tensors (only those needed)."""
        passes = [row_pass(r, k) for r, k in zip(rows, keys, strict=True)]
        names = plan.names
        steps_left = k_fixed = k_host = dream_f = None
        if "low_confidence" in names:
            steps_left = self.plans.vec(tuple(p.steps_left for p in passes), torch.long)
        if "sdar_static" in names or "sdar_dynamic" in names:
            k_host = [p.k_fixed for p in passes]
            k_fixed = self.plans.vec(tuple(k_host), torch.long)
        if "dream_topk" in names or "dream_entropy" in names:
            dream_f = self.plans.vec(tuple(p.dream_f for p in passes), torch.float32)
        return PolicyKnobs(steps_left=steps_left, threshold=plan.threshold,
                           entropy_bound=plan.entropy_bound, k_fixed=k_fixed, k_host=k_host,
                           block=plan.block, dream_f=dream_f)
