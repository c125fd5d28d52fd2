"""What a pass plan holds (`AttnPlan`, `PassPlan`, `Binding`) and the stateless geometry the
plan cache (engine.pass_plan) keys and lays out plans by: `shape_key` (a row's geometry relative
to its window, and the absolute numbers a bind moves), `cache_bucket` (the cached length a
fixed-shape pass is laid out for) and `to_device` (a small host list on the device without a
host wait). Knows nothing about caching or the model."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffvoice.engine.rowbatch import INT, RowKey


@dataclass
class AttnPlan:
    """What DiffusionLM.forward_step reuses across passes of one geometry (or, without one,
    builds for the pass: DiffusionLM.pass_geometry)."""

    cos: torch.Tensor  # [B, L, 1, D]; on the Triton path (`kernel`) the table [P, D]
    sin: torch.Tensor  # [B, L, 1, D], first half negated (x * cos + roll(x, D/2) * sin);
    # on the Triton path the plain table [P, D] (the rotary kernel reads both by position)
    mask: torch.Tensor | None  # float additive [B, 1, L, keys] (0 / -inf), None = all visible
    # pool layout (batch 1): (slot, kv0, kv1, offset) - write new tokens [offset:] (positions
    # [kv0, kv1)) into the slot's pools, attend over pool[slot, :, :kv1]
    pool: tuple[int, int, int, int] | None = None
    direct: bool = False  # no cache read or written: attend over the new keys only
    # pool layout: per layer (k_dst, v_dst [L', Hkv, D] pool views the new K/V are copied into,
    # keys, values [1, Hkv, kv1, D] pool views attention reads)
    views: list[tuple[torch.Tensor, ...]] | None = None
    # the Triton kernels run the pass (attention takes the geometry itself, `mask` is None;
    # RMSNorm with its residual add and rotary are fused): only in the per-pass geometry
    # DiffusionLM.forward_step builds when the runner has no plan
    kernel: bool = False


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
    anchors: tuple | None = None  # the absolute (slot, q_end, visible) per row it is bound to
    binding: Binding | None = None  # batch 1: what a bind keeps


@dataclass
class Binding:
    """What a batch-1 bind needs that does not move with the anchors."""

    store: torch.Tensor | None = None  # [1, L] fed tokens whose K/V this pass stores


def cache_bucket(cached: int, max_seq_len: int) -> int:
    """The cached length a plan or a fixed-shape pass is laid out for: the next power of two
    from 16, at most the canvas (keys past a row's own cached length are masked)."""
    tc = 16
    while tc < cached:
        tc *= 2
    return min(tc, max_seq_len)


def _clamp(v: int, hi: int) -> int:
    """An offset as far as comparisons with indices in [0, hi) can tell (and whether it is past
    hi): every value below 0 compares like -1, every value past hi like hi + 1."""
    return -1 if v < 0 else (hi + 1 if v > hi else v)


def shape_key(keys: tuple[RowKey, ...], shift: int, block: int) -> tuple[tuple, tuple]:
    """(shape, anchors): what a one-row plan's reusable tensors depend on - the row's geometry
    relative to its window, its flags and policy constants - and the absolute numbers a bind
    moves: (slot, q_end, visible)."""
    host = [k.ints for k in keys]
    q_start, q_end, first = INT["q_start"], INT["q_end"], INT["first"]
    W = max(r[q_end] - r[q_start] for r in host)
    L = max(max(r[q_end] - r[first] for r in host), W + shift)
    rows, anchors = [], []
    for k, r in zip(keys, host, strict=True):
        end = r[q_end]
        lo, ws = end - L, end - W  # absolute position of fed index 0 and of window slot 0
        vis = r[INT["visible"]]
        rows.append((
            _clamp(r[first] - lo, L), _clamp(vis - lo, L), _clamp(r[q_start] - lo, L),
            _clamp(r[first] - ws, W), _clamp(r[INT["d_start"]] - ws, W),
            _clamp(r[INT["d_end"]] - ws, W), _clamp(r[INT["block_start"]] - ws, W),
            _clamp(r[INT["prompt_len"]] - ws, W), _clamp(r[INT["gen_end"]] - ws, W),
            _clamp(r[q_start] - ws, W), max(0, -lo), end % block if block else 0, vis == 0,
            r[INT["writes"]], r[INT["stop"]], r[INT["eos_fill"]], r[INT["final"]],
            r[INT["full_vocab"]], r[INT["first_token"]], k.policy, k.policy_id, k.threshold,
            k.entropy_bound))
        anchors.append((r[INT["slot"]], end, vis))
    return (W, L, tuple(rows)), tuple(anchors)


def to_device(values: list | tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A small host list as a device tensor without a host wait: on CUDA through pinned memory
    with a non-blocking copy (a pageable copy waits for the stream, so a plan built while an
    overlapped step runs would wait for that step: EngineConfig.overlap)."""
    if device.type != "cuda":
        return torch.tensor(values, dtype=dtype, device=device)
    return torch.tensor(values, dtype=dtype, pin_memory=True).to(device, non_blocking=True)
