"""The device-side geometry of one denoising pass, built once and reused.

A pass needs ~30 small tensors derived from host-known per-row numbers (positions, which keys are
valid, where K/V is stored, the attention mask, rotary tables, which window slots are in the
decode block...). They stay the same for every pass inside a block, so `PlanCache.get` builds
them once and returns the cached `PassPlan` afterwards.

One row: most of them depend only on the row's geometry *relative to its window* (how many
tokens are fed, where the decode block, the prompt end and the generation end fall in the
window, whether keys are cached) and per-request constants - the same for every block of a
decode - so its plan is keyed by that *shape* (`shape_key`), not by absolute positions. When a
shape comes back at new positions (the next block), the plan is *bound* to them: views of
tables made once (positions, rotary rows, the K/V pools) are re-sliced, and only the write
positions and, on a pass whose queries span two blocks, the mask are computed. In steady-state
decoding no one-row plan is built.

Several rows: the plan is kept under the rows' absolute geometry for the passes of a block. At
a new geometry it is assembled: each row's window-relative masks are cached by the row's shape
in the batch's window (`_row_part`) and stacked; the positions, rotary rows and the attention
mask over the batch's exact cached length are computed. Only a row shape never seen before is a
build; in steady state a batch is only assembled. (Keying whole batches by shape, with the
cached length rounded up to a power of two, was tried and reverted: attention over the padded
length changed floating-point sums, so answers under concurrent load could change;
docs/perf.md. The assembled plan attends over the same length a fresh build does.)

    key = row_key(seq)                      # host ints / floats of one row (engine.rowbatch)
    plan = cache.get(keys)                  # PassPlan: tensors on the runner's device
Knows nothing about scheduling; the math of every tensor is the runner's (engine.runner).

Batch-1 passes on the torch attention backend take the *pool* layout: the new tokens' K/V are
written into the slot's pool at their positions and attention reads the pool [0, q_end) as one
view (no gather, no concatenation of cached and new keys). Positions past the cache length are
scratch: nothing reads them before they are written again, so storing the window's K/V there is
harmless. Without any cache (full recompute, bidirectional) attention reads the new keys
directly, without a mask.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

from diffvoice.engine.attention import attention_mask, uses_mask
from diffvoice.engine.plan_types import AttnPlan, Binding, PassPlan, shape_key, to_device
from diffvoice.engine.rowbatch import INT, RowKey
from diffvoice.kernels.block_attention import visibility_mask


def _col(ints: torch.Tensor, name: str) -> torch.Tensor:
    return ints[:, INT[name]]


class PlanCache:
    """Builds and keeps the PassPlans of the most recent geometries (LRU, bounded)."""

    def __init__(self, model, kv_cache, device: torch.device, max_seq_len: int, mask_id: int,
                 shift: int, max_entries: int = 64, max_mask_elements: int = 1 << 21):
        self.model, self.kv, self.device, self.T = model, kv_cache, device, max_seq_len
        self.mask_id, self.shift = mask_id, shift
        self.max_entries, self.max_mask_elements = max_entries, max_mask_elements
        self.plans: OrderedDict[tuple, PassPlan] = OrderedDict()
        self.arange = torch.arange(max_seq_len + 1, device=device)
        self.torch_attention = uses_mask(device)
        self.built = 0  # plans made (a new shape; a batch: some row's)
        self.bound = 0  # plans re-anchored or assembled (known shapes at new positions)
        cfg = model.config
        self.block = cfg.block_size if cfg.block_causal else 0
        self.windows: dict[tuple, tuple] = {}  # window-relative masks of batch-1 rows
        # a batch row's window-relative masks by (W, L, its shape): PlanCache._row_part
        self.row_parts: dict[tuple, tuple[torch.Tensor, ...]] = {}
        self.vectors: dict[tuple, torch.Tensor] = {}
        self.cos = self.sin = None
        self.dtype = next(model.parameters()).dtype
        if self.torch_attention:  # rotary tables of every position, made once
            cos, sin = model.rotary_tables(self.arange[None])
            half = cos.shape[-1] // 2
            self.cos = cos[0]
            self.sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)

    def get(self, keys: tuple[RowKey, ...]) -> PassPlan:
        """The plan of this pass. One row: the cached plan of its shape, re-anchored to the
        row's positions (built when the shape is new). Several rows: the cached plan of exactly
        this geometry, else assembled from its rows' parts (see the module docstring)."""
        if len(keys) > 1:
            return self._get_batch(keys)
        shape, anchors = shape_key(keys, self.shift, self.block)
        plan = self.plans.get(shape)
        if plan is not None:
            self.plans.move_to_end(shape)
            if plan.anchors != anchors:
                self._anchor_one(plan, keys[0])
                plan.anchors = anchors
                self.bound += 1
            return plan
        plan = self._build_one(keys[0])
        plan.anchors = anchors
        self.built += 1
        self._keep(shape, plan)
        return plan

    def _get_batch(self, keys: tuple[RowKey, ...]) -> PassPlan:
        plan = self.plans.get(keys)
        if plan is not None:
            self.plans.move_to_end(keys)
            return plan
        plan, new = self._build(keys, max(k.ints[INT["visible"]] for k in keys))
        if new:
            self.built += 1
        else:
            self.bound += 1
        self._keep(keys, plan)
        return plan

    def _keep(self, key, plan: PassPlan) -> None:
        mask = plan.attn.mask if plan.attn is not None else None
        if mask is None or mask.numel() <= self.max_mask_elements:
            self.plans[key] = plan
            if len(self.plans) > self.max_entries:
                self.plans.popitem(last=False)

    def _build(self, keys: tuple[RowKey, ...], tc: int) -> tuple[PassPlan, bool]:
        """A batch's plan -> (plan, whether a row part was new). Its window-relative parts
        come per row from `_row_part` (cached by the row's shape in this batch's window), the
        rest is computed from the rows' positions; the same tensors as computing every part
        for the whole batch at once (each is row by row)."""
        dev, T = self.device, self.T
        (W, L, shapes), _ = shape_key(keys, self.shift, self.block)
        host = [k.ints for k in keys]
        h = lambda name: [row[INT[name]] for row in host]  # noqa: E731
        new, lparts, wparts = False, [], []
        for key, shape in zip(keys, shapes, strict=True):
            part = self.row_parts.get((W, L, shape))
            if part is None:
                if len(self.row_parts) >= 4096:
                    self.row_parts.clear()
                part = self.row_parts[(W, L, shape)] = self._row_part(key.ints, W, L)
                new = True
            lparts.append(part[0])
            wparts.append(part[1])
        lrel, wrel = torch.stack(lparts), torch.stack(wparts)  # [B, 3, L], [B, 7, W]
        valid, key_valid, store = lrel.unbind(1)
        in_window, in_block, block, slot0, eos_zone, before_gen_end, counted = wrel.unbind(1)
        ints = to_device(host, torch.long, dev)
        c = lambda name: _col(ints, name)  # noqa: E731
        slots, visible = c("slot"), c("visible")
        raw = c("q_end")[:, None] + (self.arange[:L] - L)[None]  # [B, L] absolute positions
        write_pos = torch.where(store, raw, T) if any(h("writes")) else None
        gather_pos = torch.where(valid, raw, T)
        positions = raw.clamp(min=0)
        attn = self._attn(positions, key_valid, visible, tc)
        wpos = raw[:, L - W:]
        names = sorted({k.policy for k in keys})
        if not any(n.startswith("sdar_") for n in names):
            block = None
        first_token_rows = None
        if any(h("first_token")):
            first_token_rows = c("first_token").bool()[:, None]
        else:
            slot0 = None
        eos_rows = [s and (f or e) for s, f, e in zip(h("stop"), h("final"), h("eos_fill"),
                                                       strict=True)]
        if not any(eos_rows):
            eos_zone = None
        eos_fill_rows = c("eos_fill").bool()[:, None] if any(h("eos_fill")) else None
        early = not_final = None  # (a row without final commits counts its in_block slots)
        if any(h("final")) and eos_zone is not None:
            early, not_final = before_gen_end, ~c("final").bool()[:, None]
        window_idx = torch.where(in_window, wpos, T)
        full_vocab = c("full_vocab").bool() if any(h("full_vocab")) else None
        policy_ids = to_device([k.policy_id for k in keys], torch.long, dev)
        floats = to_device([(k.threshold, k.entropy_bound) for k in keys], torch.float32, dev)
        return PassPlan(
            W=W, L=L, shift=self.shift, slots=slots, slot_col=slots[:, None],
            positions=positions, key_valid=key_valid, visible=visible, cache_len_max=tc,
            gather_pos=gather_pos, write_pos=write_pos, logits_start=L - W - self.shift,
            ids_view=None, attn=attn, window_start=[e - W for e in h("q_end")], wpos=wpos,
            in_block=in_block, block=block, slot0=slot0, first_token_rows=first_token_rows,
            eos_zone=eos_zone, eos_fill_rows=eos_fill_rows, counted=counted, early=early,
            not_final=not_final, window_write=None, window_idx=window_idx, names=names,
            policy_ids=policy_ids, threshold=floats[:, 0], entropy_bound=floats[:, 1],
            full_vocab=full_vocab, full_vocab_all=all(h("full_vocab")),
            binding=Binding(store if write_pos is not None else None)), new

    def _row_part(self, row: tuple[int, ...], W: int, L: int) -> tuple[torch.Tensor, ...]:
        """One row's window-relative masks in a batch of window W fed L tokens: [3, L] (fed
        tokens: in the canvas, keys it reads, K/V it stores) and [7, W] (window slots: written
        back, in the decode block, in SDAR's aligned block, a v2 block's slot 0, in the answer
        zone of a row that stops at EOS, before gen_end, still deciding the answer). They
        depend on the row's offsets from its window only (`shape_key`), so rows of the same
        shape share them in every block."""
        g = lambda name: row[INT[name]]  # noqa: E731
        raw = g("q_end") + self.arange[:L] - L  # [L] absolute positions at this row's anchor
        valid = raw >= g("first")
        key_valid = valid & (raw >= g("visible"))
        store = key_valid & (raw < g("q_start")) & bool(g("writes"))
        wpos = raw[L - W:]
        in_block = (wpos >= g("d_start")) & (wpos < g("d_end"))
        stop, final = bool(g("stop")), bool(g("final"))
        before_gen_end = wpos < g("gen_end")
        counted = in_block & ((before_gen_end & (not stop)) | (not final) | stop)
        return (torch.stack((valid, key_valid, store)),
                torch.stack((wpos >= g("first"), in_block,
                             (wpos >= g("block_start")) & (wpos < g("d_end")),
                             wpos == g("d_start"), (wpos >= g("prompt_len")) & stop,
                             before_gen_end, counted)))

    def _attn(self, positions, key_valid, visible, tc: int) -> AttnPlan | None:
        """A batch > 1 plan's AttnPlan; None on the Triton backend (the kernel takes the
        geometry itself)."""
        if not self.torch_attention:
            return None
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]
        allowed = visibility_mask(visible, positions, key_valid, self.block, tc)  # [B, L, tc+L]
        # a query that sees nothing (no cached key, no new one) attends to itself: its output
        # is never used, and SDPA stays finite. Whether a row has a cache is part of the shape,
        # so this part of the mask stays fixed too.
        new_vis = allowed[:, :, tc:]
        blind = ~new_vis.any(-1) & (visible == 0)[:, None]  # [B, L]
        L = new_vis.shape[-1]
        new_vis |= torch.eye(L, dtype=torch.bool, device=self.device)[None] & blind[:, :, None]
        mask = self._float_mask(allowed[:, None])
        return AttnPlan(cos, sin, mask)

    def _float_mask(self, allowed: torch.Tensor) -> torch.Tensor:
        return torch.zeros(allowed.shape, dtype=self.dtype, device=self.device).masked_fill_(
            ~allowed, float("-inf"))

    # ------------------------------------------------------------------ batch 1
    def vec(self, values: tuple, dtype: torch.dtype) -> torch.Tensor:
        """A small constant vector on the device, made once per distinct value."""
        key = (values, dtype)
        t = self.vectors.get(key)
        if t is None:
            if len(self.vectors) >= 1024:
                self.vectors.clear()
            t = self.vectors[key] = to_device(values, dtype, self.device)
        return t

    def _build_one(self, key: RowKey) -> PassPlan:
        """The same tensors as `_build` for one row: what its shape fixes (window-relative
        masks shared by every block and request of the shape, key validity, policy vectors),
        then the anchored views (`_anchor_one`)."""
        row, shift = key.ints, self.shift
        g = lambda name: row[INT[name]]  # noqa: E731
        q_start, q_end, first, vis = g("q_start"), g("q_end"), g("first"), g("visible")
        W = q_end - q_start
        L = max(q_end - first, W + shift)
        rel = self.arange[:L] - L  # fed index - L
        key_valid = rel[None] >= max(first, vis) - q_end
        store = key_valid & (rel[None] < q_start - q_end) if g("writes") else None
        sdar = key.policy in ("sdar_static", "sdar_dynamic")
        win = self._window(W, g("d_start") - q_start, g("d_end") - q_start,
                           g("block_start") - q_start if sdar else None, g("first_token"),
                           g("prompt_len") - q_start, g("gen_end") - q_start, g("stop"),
                           g("eos_fill"), g("final"))
        in_block, block, slot0, ft_rows, eos_zone, fill_rows, counted, early, not_final = win
        full = g("full_vocab")
        plan = PassPlan(
            W=W, L=L, shift=shift, slots=None, slot_col=None, positions=None,
            key_valid=key_valid, visible=None, cache_len_max=vis, gather_pos=None,
            write_pos=None, logits_start=L - W - shift, ids_view=None, attn=None,
            window_start=[q_start], wpos=None, in_block=in_block, block=block, slot0=slot0,
            first_token_rows=ft_rows, eos_zone=eos_zone, eos_fill_rows=fill_rows,
            counted=counted, early=early, not_final=not_final, window_write=None,
            window_idx=None, names=[key.policy],
            policy_ids=self.vec((key.policy_id,), torch.long),
            threshold=self.vec((key.threshold,), torch.float32),
            entropy_bound=self.vec((key.entropy_bound,), torch.float32),
            full_vocab=self.vec((True,), torch.bool) if full else None,
            full_vocab_all=bool(full), binding=Binding(store))
        self._anchor_one(plan, key)
        return plan

    def _anchor_one(self, plan: PassPlan, key: RowKey) -> None:
        """A batch-1 plan's absolute part: views of the aranges, rotary tables and K/V pools
        at the row's positions; the write positions (and a two-block pass's mask) computed."""
        row, T, L, W = key.ints, self.T, plan.L, plan.W
        g = lambda name: row[INT[name]]  # noqa: E731
        slot, q_end, first, vis = g("slot"), g("q_end"), g("first"), g("visible")
        q_start = q_end - W
        lo = q_end - L
        raw = self.arange[lo:q_end][None] if lo >= 0 else \
            (self.arange[:L] + lo)[None]  # [1, L] absolute positions (padding < 0)
        plan.positions = raw if lo >= 0 else raw.clamp(min=0)
        store = plan.binding.store
        plan.write_pos = torch.where(store, raw, T) if store is not None else None
        plan.ids_view = (slot, lo, q_end) if lo >= first else None
        plan.gather_pos = torch.where(raw >= first, raw, T) if plan.ids_view is None else None
        if self.torch_attention:
            plan.attn = self._attn_one(row, raw, plan.positions, lo, L)
        plan.slots = self.vec((slot,), torch.long)
        plan.slot_col = plan.slots[:, None]
        plan.visible, plan.cache_len_max = self.vec((vis,), torch.long), vis
        plan.window_start = [q_start]
        plan.wpos = self.arange[q_start:q_end][None]
        plan.window_write = (slot, q_start, q_end)

    def _window(self, W, d0, d1, b0, first_token, p0, g0, stop, eos_fill, final) -> tuple:
        """Masks over one row's window [1, W], relative to its start (cached by shape)."""
        wkey = (W, d0, d1, b0, first_token, p0, g0, stop, eos_fill, final)
        win = self.windows.get(wkey)
        if win is not None:
            return win
        rel = self.arange[:W][None]
        in_block = (rel >= d0) & (rel < d1)
        block = (rel >= b0) & (rel < d1) if b0 is not None else None
        slot0 = ft_rows = None
        if first_token:
            slot0, ft_rows = rel == d0, self.vec((True,), torch.bool)[:, None]
        eos_zone = rel >= p0 if stop and (final or eos_fill) else None
        fill_rows = self.vec((True,), torch.bool)[:, None] if eos_fill and stop else None
        counted, early, not_final = in_block, None, None
        if final:
            before_gen_end = rel < g0
            counted = in_block if stop else in_block & before_gen_end
            if eos_zone is not None:
                early, not_final = before_gen_end, self.vec((False,), torch.bool)[:, None]
        win = (in_block, block, slot0, ft_rows, eos_zone, fill_rows, counted, early, not_final)
        if len(self.windows) >= 4096:
            self.windows.clear()
        self.windows[wkey] = win
        return win

    def _attn_one(self, row, raw, positions, lo: int, L: int) -> AttnPlan:
        cfg = self.model.config
        block = cfg.block_size if cfg.block_causal else 0
        q_end, first, vis = row[INT["q_end"]], row[INT["first"]], row[INT["visible"]]
        if lo >= 0:
            cos, sin = self.cos[lo:q_end][None, :, None], self.sin[lo:q_end][None, :, None]
        else:
            cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]
        if first > vis:  # never reached by the geometry in engine.sequence; kept general
            mask = attention_mask(positions, raw >= max(first, vis),
                                  self.vec((vis,), torch.long), vis, block)
            return AttnPlan(cos, sin, self._float_mask(mask))
        offset = vis - lo  # fed index of the first new key (position vis)
        if vis == 0 and not row[INT["writes"]] and block == 0 and offset == 0:
            return AttnPlan(cos, sin, None, direct=True)
        mask = None
        if block and (lo // block if lo >= 0 else -1) < (q_end - 1) // block:
            # queries in earlier blocks: key j visible to the query at p iff
            # j < (p // block + 1) * block (a padded query sees key 0)
            limit = ((raw[0] // block + 1) * block).clamp(1, q_end)  # [L]
            allowed = self.arange[:q_end][None, :] < limit[:, None]  # [L, q_end]
            mask = self._float_mask(allowed[None, None])
        slot = row[INT["slot"]]
        views = [(k[slot, :, vis:q_end].transpose(0, 1), v[slot, :, vis:q_end].transpose(0, 1),
                  k[slot:slot + 1, :, :q_end], v[slot:slot + 1, :, :q_end]) for k, v in self.kv]
        return AttnPlan(cos, sin, mask, pool=(slot, vis, q_end, offset), views=views)
