"""The device-side geometry of one denoising pass, built once per distinct geometry and reused.

A pass needs ~30 small tensors derived from host-known per-row numbers (positions, which keys are
valid, where K/V is stored, the attention mask, rotary tables, which window slots are in the
decode block...). They depend only on the rows' geometry and per-request constants, which stay
the same for every pass inside a block (and for a whole Dream canvas), so `PlanCache.get` builds
them once per geometry key and returns the cached `PassPlan` afterwards. On small models the
per-pass Python and tensor-creation cost is a large share of a pass.

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
from dataclasses import dataclass

import torch

from diffvoice.engine.attention import attention_mask, uses_mask
from diffvoice.engine.rowbatch import INT, RowKey


@dataclass
class AttnPlan:
    """What DiffusionLM.forward_step reuses across passes of one geometry."""

    cos: torch.Tensor  # [B, L, 1, D]
    sin: torch.Tensor  # [B, L, 1, D], first half negated (x * cos + roll(x, D/2) * sin)
    mask: torch.Tensor | None  # float additive [B, 1, L, keys] (0 / -inf), None = all visible
    # pool layout (batch 1): (slot, kv0, kv1, offset) - write new tokens [offset:] (positions
    # [kv0, kv1)) into the slot's pools, attend over pool[slot, :, :kv1]
    pool: tuple[int, int, int, int] | None = None
    direct: bool = False  # no cache read or written: attend over the new keys only
    # pool layout: per layer (k_dst, v_dst [L', Hkv, D] pool views the new K/V are copied into,
    # keys, values [1, Hkv, kv1, D] pool views attention reads)
    views: list[tuple[torch.Tensor, ...]] | None = None


@dataclass
class PassPlan:
    W: int  # window width
    L: int  # tokens fed per row
    shift: int
    slots: torch.Tensor  # [B]
    slot_col: torch.Tensor  # [B, 1]
    positions: torch.Tensor  # [B, L] absolute, clamped at 0
    key_valid: torch.Tensor  # [B, L]
    visible: torch.Tensor  # [B] cached positions each row reads
    cache_len_max: int
    gather_pos: torch.Tensor  # [B, L]: canvas column of each fed token (T = trash)
    write_pos: torch.Tensor | None  # [B, L] pool position to store (T = discard); None: none
    logits_start: int
    ids_view: tuple[int, int, int] | None  # (slot, start, end): the fed tokens are one slice
    attn: AttnPlan | None  # None: the model builds its own (e.g. the Triton kernel)
    window_start: list[int]
    wpos: torch.Tensor  # [B, W] absolute position of each window slot
    in_block: torch.Tensor  # [B, W] the decode block's slots
    block: torch.Tensor | None  # [B, W] the aligned decode block (SDAR's top-k)
    slot0: torch.Tensor | None  # [B, W] a v2 block's slot 0, for rows committing it alone
    first_token_rows: torch.Tensor | None  # [B, 1]; None: no such row
    eos_zone: torch.Tensor | None  # [B, W] answer slots of rows that stop at EOS
    eos_fill_rows: torch.Tensor | None  # [B, 1] rows filling masks behind an EOS
    counted: torch.Tensor  # [B, W] masks that decide the answer when no row stops at EOS
    early: torch.Tensor | None  # [B, W] slots before gen_end (final rows that stop at EOS)
    not_final: torch.Tensor | None  # [B, 1]
    window_write: tuple[int, int, int] | None  # (slot, start, end) batch-1 write-back slice
    window_idx: torch.Tensor  # [B, W] canvas column each window slot is written back to
    names: list[str]  # policies present
    policy_ids: torch.Tensor  # [B]
    threshold: torch.Tensor  # [B] f32
    entropy_bound: torch.Tensor  # [B] f32
    full_vocab: torch.Tensor | None  # [B] bool; None: no row
    full_vocab_all: bool  # every row's confidence is over the full vocabulary
    # batch 1: the window slots [lo, hi) whose logits a pass can use (the slots its policy may
    # commit or re-predict); the forward computes only those rows' logits (None: all W)
    logit_rows: tuple[int, int] | None = None


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
        self.built = 0
        self.windows: dict[tuple, tuple] = {}  # window-relative masks of batch-1 rows
        self.vectors: dict[tuple, torch.Tensor] = {}
        self.cos = self.sin = None
        self.dtype = next(model.parameters()).dtype
        if self.torch_attention:  # rotary tables of every position, made once
            cos, sin = model.rotary_tables(self.arange[None])
            half = cos.shape[-1] // 2
            self.cos = cos[0]
            self.sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)

    def get(self, keys: tuple[RowKey, ...]) -> PassPlan:
        plan = self.plans.get(keys)
        if plan is not None:
            self.plans.move_to_end(keys)
            return plan
        plan = self._build_one(keys[0]) if len(keys) == 1 else self._build(keys)
        self.built += 1
        mask = plan.attn.mask if plan.attn is not None else None
        if mask is None or mask.numel() <= self.max_mask_elements:
            self.plans[keys] = plan
            if len(self.plans) > self.max_entries:
                self.plans.popitem(last=False)
        return plan

    def _build(self, keys: tuple[RowKey, ...]) -> PassPlan:
        dev, shift, T = self.device, self.shift, self.T
        host = [k.ints for k in keys]
        h = lambda name: [row[INT[name]] for row in host]  # noqa: E731
        W = max(e - s for e, s in zip(h("q_end"), h("q_start"), strict=True))
        L = max(max(e - f for e, f in zip(h("q_end"), h("first"), strict=True)), W + shift)
        ints = torch.tensor(host, dtype=torch.long, device=dev)
        c = lambda name: _col(ints, name)  # noqa: E731
        slots, q_end, first, visible = c("slot"), c("q_end"), c("first"), c("visible")
        raw = q_end[:, None] - L + self.arange[:L][None]  # [B, L]
        valid = raw >= first[:, None]
        key_valid = valid & (raw >= visible[:, None])
        write_pos = None
        if any(h("writes")):
            store = key_valid & c("writes").bool()[:, None] & (raw < c("q_start")[:, None])
            write_pos = torch.where(store, raw, T)
        gather_pos = torch.where(valid, raw, T)
        positions = raw.clamp(min=0)
        cache_len_max = max(h("visible"))
        logits_start = L - W - shift
        b1 = len(host) == 1
        row = host[0]
        q_end0, first0 = row[INT["q_end"]], row[INT["first"]]
        ids_view = None
        if b1 and q_end0 - L >= first0:  # no padding: the fed tokens are one canvas slice
            ids_view = (row[INT["slot"]], q_end0 - L, q_end0)
        attn = self._attn(host, positions, raw, key_valid, visible, cache_len_max, L)

        wpos = raw[:, L - W:]
        d_start, d_end = c("d_start")[:, None], c("d_end")[:, None]
        in_block = (wpos >= d_start) & (wpos < d_end)
        names = sorted({k.policy for k in keys})
        sdar = any(n.startswith("sdar_") for n in names)
        block = (wpos >= c("block_start")[:, None]) & (wpos < d_end) if sdar else None
        slot0 = first_token_rows = None
        if any(h("first_token")):
            slot0 = wpos == d_start
            first_token_rows = c("first_token").bool()[:, None]
        stop = c("stop").bool()[:, None]
        eos_rows = [s and (f or e) for s, f, e in zip(h("stop"), h("final"), h("eos_fill"),
                                                       strict=True)]
        eos_zone = (wpos >= c("prompt_len")[:, None]) & stop if any(eos_rows) else None
        eos_fill_rows = c("eos_fill").bool()[:, None] if any(h("eos_fill")) else None
        final = c("final").bool()[:, None]
        early = not_final = None
        counted = in_block
        if any(h("final")):
            before_gen_end = wpos < c("gen_end")[:, None]
            # rows that ignore EOS: before_eos is all True, so this part is static
            counted = in_block & ((before_gen_end & ~stop) | ~final | stop)
            if eos_zone is not None:
                early, not_final = before_gen_end, ~final
        in_window = wpos >= first[:, None]
        window_idx = torch.where(in_window, wpos, T)
        window_write = (row[INT["slot"]], q_end0 - W, q_end0) if b1 else None
        full_vocab = c("full_vocab").bool() if any(h("full_vocab")) else None
        policy_ids = torch.tensor([k.policy_id for k in keys], dtype=torch.long, device=dev)
        floats = torch.tensor([(k.threshold, k.entropy_bound) for k in keys],
                              dtype=torch.float32, device=dev)
        return PassPlan(
            W=W, L=L, shift=shift, slots=slots, slot_col=slots[:, None], positions=positions,
            key_valid=key_valid, visible=visible, cache_len_max=cache_len_max,
            gather_pos=gather_pos, write_pos=write_pos, logits_start=logits_start,
            ids_view=ids_view, attn=attn, window_start=[e - W for e in h("q_end")], wpos=wpos,
            in_block=in_block, block=block, slot0=slot0, first_token_rows=first_token_rows,
            eos_zone=eos_zone, eos_fill_rows=eos_fill_rows, counted=counted, early=early,
            not_final=not_final, window_write=window_write, window_idx=window_idx, names=names,
            policy_ids=policy_ids, threshold=floats[:, 0], entropy_bound=floats[:, 1],
            full_vocab=full_vocab, full_vocab_all=all(h("full_vocab")))

    def _attn(self, host, positions, raw, key_valid, visible, cache_len_max: int,
              L: int) -> AttnPlan | None:
        if not self.torch_attention:
            return None  # the Triton kernel takes the geometry itself
        cfg = self.model.config
        cos, sin = self.cos[positions][:, :, None], self.sin[positions][:, :, None]
        block = cfg.block_size if cfg.block_causal else 0
        mask = attention_mask(positions, key_valid, visible, cache_len_max, block)
        return AttnPlan(cos, sin, self._float_mask(mask))

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
            t = self.vectors[key] = torch.tensor(values, dtype=dtype, device=self.device)
        return t

    def _build_one(self, key: RowKey) -> PassPlan:
        """The same tensors as `_build` for one row, from views of aranges and tables and
        window-relative masks shared by every block and request of the same shape."""
        row, shift, T = key.ints, self.shift, self.T
        g = lambda name: row[INT[name]]  # noqa: E731
        slot, q_start, q_end, first, vis = g("slot"), g("q_start"), g("q_end"), g("first"), \
            g("visible")
        W = q_end - q_start
        L = max(q_end - first, W + shift)
        lo = q_end - L
        raw = self.arange[lo:q_end][None] if lo >= 0 else \
            (self.arange[:L] + lo)[None]  # [1, L] absolute positions (padding < 0)
        positions = raw if lo >= 0 else raw.clamp(min=0)
        key_valid = raw >= max(first, vis)
        write_pos = None
        if g("writes"):
            write_pos = torch.where(key_valid & (raw < q_start), raw, T)
        ids_view = (slot, lo, q_end) if lo >= first else None
        gather_pos = torch.where(raw >= first, raw, T) if ids_view is None else None
        attn = None
        if self.torch_attention:
            attn = self._attn_one(row, raw, positions, lo, L)
        sdar = key.policy in ("sdar_static", "sdar_dynamic")
        win = self._window(W, g("d_start") - q_start, g("d_end") - q_start,
                           g("block_start") - q_start if sdar else None, g("first_token"),
                           g("prompt_len") - q_start, g("gen_end") - q_start, g("stop"),
                           g("eos_fill"), g("final"))
        in_block, block, slot0, ft_rows, eos_zone, fill_rows, counted, early, not_final = win
        slots = self.vec((slot,), torch.long)
        full = g("full_vocab")
        # logits the policy can read: the block's masks ([d_start, d_end)); SDAR's top-k also
        # re-predicts the block's decoded slots ([block_start, d_end)). Constrained rows keep all.
        lo = (g("block_start") if sdar else g("d_start")) - q_start
        hi = g("d_end") - q_start
        logit_rows = (lo, hi) if 0 <= lo < hi <= W and (lo, hi) != (0, W) else None
        return PassPlan(
            W=W, L=L, shift=shift, slots=slots, slot_col=slots[:, None], positions=positions,
            key_valid=key_valid, visible=self.vec((vis,), torch.long), cache_len_max=vis,
            gather_pos=gather_pos, write_pos=write_pos, logits_start=L - W - shift,
            ids_view=ids_view, attn=attn, window_start=[q_start],
            wpos=self.arange[q_start:q_end][None], in_block=in_block, block=block, slot0=slot0,
            first_token_rows=ft_rows, eos_zone=eos_zone, eos_fill_rows=fill_rows,
            counted=counted, early=early, not_final=not_final,
            window_write=(slot, q_start, q_end), window_idx=None, names=[key.policy],
            policy_ids=self.vec((key.policy_id,), torch.long),
            threshold=self.vec((key.threshold,), torch.float32),
            entropy_bound=self.vec((key.entropy_bound,), torch.float32),
            full_vocab=self.vec((True,), torch.bool) if full else None,
            full_vocab_all=bool(full), logit_rows=logit_rows)

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
