"""Block attention: a block's queries against the cached prefix plus the block's own keys (GQA).

Math, per batch row b, query head h (kv head h // G, G = Hq / Hkv), query i:
    keys  = cache[b, :cache_lens[b]]  (absolute positions 0..cache_lens[b]-1, all visible)
            ++ new[b, j] for j with new_valid[b, j] and
               (block_size == 0  or  positions[b, j] // block_size <= positions[b, i] // block_size)
    out[b, h, i] = softmax_j(scale * q . k_j) @ v_j      (scale defaults to D ** -0.5)
A query with no visible key outputs zeros (never NaN).

Kernel: flash-attention style. One program owns BLOCK_M rows of the (group, query) pairs of one
(batch, kv head) -- all G query heads that share a kv head read its K/V once -- and streams
the cache then the new keys in BLOCK_N tiles with an online softmax (exp2 domain):
    m' = max(m, rowmax(S)),  acc <- acc * 2^(m - m') + 2^(S - m') V,  l <- l * 2^(m - m') + rowsum.
For few programs (batch 1, long prefix) the cache is split across `num_splits` programs
(flash-decoding); each writes (acc / l, log2-sum-exp) and a second kernel merges them. The split
count depends only on shapes, never on cache_lens values (no host sync, CUDA-graph safe).

Shapes: q [B, Hq, L, D]; k_new, v_new [B, Hkv, L, D]; k_cache, v_cache [B, Hkv, T, D], or with
`slots` [B] int a pool [S, Hkv, T, D] of which row b reads slot slots[b] (no gathered copy);
cache_lens [B] int; positions [B, L] int64; new_valid [B, L] bool (every input any strides: the
engine passes views). out [B, Hq, L, D], q's dtype. Accumulation is fp32; fp32 inputs use IEEE
fp32 dots (no TF32).
This module knows nothing about slot allocation or the model; kernels/ops.py dispatches.
"""

from __future__ import annotations

import math

import torch

from diffvoice.kernels._triton import num_sms, tl, triton

_LOG2E = 1.4426950408889634


@triton.jit
def _dot(a, b, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    # UPCAST: Triton 3.9's CPU interpreter multiplies bf16 dot operands as raw uint16 bits, so
    # under the interpreter the operands go to fp32 first (exact products, same fp32 sums).
    if UPCAST:
        a = a.to(tl.float32)
        b = b.to(tl.float32)
    if IEEE:
        r = tl.dot(a, b, input_precision="ieee")
    else:
        r = tl.dot(a, b)
    return r


@triton.jit
def _attend_tile(q, k, v, visible, m_i, l_i, acc, qk_scale,
                 IEEE: tl.constexpr, UPCAST: tl.constexpr):
    # One online-softmax step over a tile of keys; visible broadcasts to [BLOCK_M, BLOCK_N].
    s = _dot(q, tl.trans(k), IEEE, UPCAST)
    s = tl.where(visible, s * qk_scale, -float("inf"))  # [BLOCK_M, BLOCK_N], log2 domain
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)  # all hidden so far: keep zeros
    alpha = tl.exp2(m_i - m_safe)
    p = tl.exp2(s - m_safe[:, None])
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None] + _dot(p.to(v.dtype), v, IEEE, UPCAST)
    return m_new, l_i, acc


@triton.jit
def _block_attn_kernel(
    q_ptr, kn_ptr, vn_ptr, kc_ptr, vc_ptr, lens_ptr, pos_ptr, valid_ptr, slots_ptr,
    out_ptr, o_part_ptr, lse_part_ptr,
    sq_b, sq_h, sq_l, sq_d, skn_b, skn_h, skn_l, skn_d, svn_b, svn_h, svn_l, svn_d,
    skc_b, skc_h, skc_t, skc_d, svc_b, svc_h, svc_t, svc_d,
    so_b, so_h, so_l, so_d, spos_b, spos_l, sval_b, sval_l, slens, sslots,
    Hq, Hkv, L, G, D, qk_scale, block_size, num_splits, n_flat,
    CAUSAL: tl.constexpr, FINAL: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    HAS_SLOTS: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_bh = tl.program_id(1)
    split = tl.program_id(2)
    b = (pid_bh // Hkv).to(tl.int64)  # int64 so batch offsets into a large slot pool can't wrap
    hk = pid_bh % Hkv

    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # [BLOCK_M] index into (group, query) pairs
    row_ok = rows < G * L
    g = rows // L
    qi = rows % L
    hq = hk * G + g
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < D
    q = tl.load(q_ptr + b * sq_b + hq[:, None] * sq_h + qi[:, None] * sq_l + dd[None, :] * sq_d,
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # [BLOCK_M, BLOCK_D]
    q_pos = tl.load(pos_ptr + b * spos_b + qi * spos_l, mask=row_ok, other=0)
    if CAUSAL:
        q_blk = q_pos // block_size

    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    # Cache keys: this split's share of positions [0, cache_len), visible to every query.
    cache_len = tl.load(lens_ptr + b * slens).to(tl.int32)
    chunk = tl.cdiv(tl.cdiv(cache_len, num_splits), BLOCK_N) * BLOCK_N
    start = split * chunk
    end = tl.minimum(start + chunk, cache_len)
    if HAS_SLOTS:  # the cache is a pool of slots: row b reads slot slots[b]
        cb = tl.load(slots_ptr + b * sslots).to(tl.int64)
    else:
        cb = b
    kc_base = kc_ptr + cb * skc_b + hk * skc_h
    vc_base = vc_ptr + cb * svc_b + hk * svc_h
    for n0 in range(start, end, BLOCK_N):
        cols = n0 + tl.arange(0, BLOCK_N)
        col_ok = cols < end
        kv_mask = col_ok[:, None] & d_ok[None, :]
        k = tl.load(kc_base + cols[:, None] * skc_t + dd[None, :] * skc_d, mask=kv_mask, other=0.0)
        v = tl.load(vc_base + cols[:, None] * svc_t + dd[None, :] * svc_d, mask=kv_mask, other=0.0)
        m_i, l_i, acc = _attend_tile(q, k, v, col_ok[None, :], m_i, l_i, acc, qk_scale, IEEE,
                                     UPCAST)

    # New keys of the block (split 0 only): padding hidden, block-causal when block_size > 0.
    if split == 0:
        kn_base = kn_ptr + b * skn_b + hk * skn_h
        vn_base = vn_ptr + b * svn_b + hk * svn_h
        for n0 in range(0, L, BLOCK_N):
            cols = n0 + tl.arange(0, BLOCK_N)
            col_ok = cols < L
            k_valid = tl.load(valid_ptr + b * sval_b + cols * sval_l, mask=col_ok, other=0) != 0
            k_pos = tl.load(pos_ptr + b * spos_b + cols * spos_l, mask=col_ok, other=0)
            visible = k_valid[None, :]  # [1, BLOCK_N]
            if CAUSAL:
                visible = visible & ((k_pos // block_size)[None, :] <= q_blk[:, None])
            kv_mask = col_ok[:, None] & d_ok[None, :]
            k = tl.load(kn_base + cols[:, None] * skn_l + dd[None, :] * skn_d, mask=kv_mask,
                        other=0.0)
            v = tl.load(vn_base + cols[:, None] * svn_l + dd[None, :] * svn_d, mask=kv_mask,
                        other=0.0)
            m_i, l_i, acc = _attend_tile(q, k, v, visible, m_i, l_i, acc, qk_scale, IEEE, UPCAST)

    has_keys = l_i > 0.0
    o = acc / tl.where(has_keys, l_i, 1.0)[:, None]  # zeros where nothing was visible
    out_mask = row_ok[:, None] & d_ok[None, :]
    if FINAL:
        o_ptrs = out_ptr + b * so_b + hq[:, None] * so_h + qi[:, None] * so_l + dd[None, :] * so_d
        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=out_mask)
    else:
        flat = (b * Hq + hq) * L + qi  # [BLOCK_M] row of the [B*Hq*L] partial buffers
        part = split * n_flat + flat
        tl.store(o_part_ptr + part[:, None] * D + dd[None, :], o, mask=out_mask)
        lse = tl.where(has_keys, m_i + tl.log2(tl.where(has_keys, l_i, 1.0)), -float("inf"))
        tl.store(lse_part_ptr + part, lse, mask=row_ok)


@triton.jit
def _block_attn_combine_kernel(
    o_part_ptr, lse_part_ptr, out_ptr, so_b, so_h, so_l, so_d, Hq, L, D, n_flat, num_splits,
    SPLITS_PAD: tl.constexpr, BLOCK_D: tl.constexpr,
):
    flat = tl.program_id(0).to(tl.int64)  # = (b * Hq + h) * L + i
    b = flat // (Hq * L)
    h = (flat // L) % Hq
    i = flat % L
    ks = tl.arange(0, SPLITS_PAD)
    k_ok = ks < num_splits
    dd = tl.arange(0, BLOCK_D)
    d_ok = dd < D
    lse = tl.load(lse_part_ptr + ks * n_flat + flat, mask=k_ok, other=-float("inf"))
    lse_max = tl.max(lse, axis=0)
    lse_safe = tl.where(lse_max == -float("inf"), 0.0, lse_max)
    w = tl.exp2(lse - lse_safe)  # [SPLITS_PAD]; 0 for splits that saw no key
    o = tl.load(o_part_ptr + (ks[:, None] * n_flat + flat) * D + dd[None, :],
                mask=k_ok[:, None] & d_ok[None, :], other=0.0)
    w_sum = tl.sum(w, axis=0)
    res = tl.sum(o * w[:, None], axis=0) / tl.where(w_sum > 0.0, w_sum, 1.0)
    tl.store(out_ptr + b * so_b + h * so_h + i * so_l + dd * so_d,
             res.to(out_ptr.dtype.element_ty), mask=d_ok)


def _check_inputs(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                  block_size, slots=None):
    if q.dim() != 4:
        raise ValueError(f"q must be [B, Hq, L, D], got {tuple(q.shape)}")
    batch, hq, length, dim = q.shape
    hkv = k_new.shape[1]
    for name, t in (("k_new", k_new), ("v_new", v_new)):
        if tuple(t.shape) != (batch, hkv, length, dim):
            raise ValueError(f"{name} must be [B, Hkv, L, D] = {(batch, hkv, length, dim)}, "
                             f"got {tuple(t.shape)}")
    if k_cache.dim() != 4 or tuple(k_cache.shape) != tuple(v_cache.shape):
        raise ValueError("k_cache and v_cache must both be [B, Hkv, T, D]")
    if slots is not None:
        if tuple(slots.shape) != (batch,) or slots.is_floating_point():
            raise ValueError("slots must be an integer tensor [B]")
        if (k_cache.shape[1], k_cache.shape[3]) != (hkv, dim):
            raise ValueError(f"a k_cache pool must be [S, Hkv, T, D] with Hkv={hkv}, D={dim}, "
                             f"got {tuple(k_cache.shape)}")
    elif (k_cache.shape[0], k_cache.shape[1], k_cache.shape[3]) != (batch, hkv, dim):
        raise ValueError(f"k_cache must be [B, Hkv, T, D] with B={batch}, Hkv={hkv}, D={dim}, "
                         f"got {tuple(k_cache.shape)}")
    if hkv == 0 or hq % hkv != 0:
        raise ValueError(f"query heads ({hq}) must be a multiple of kv heads ({hkv})")
    if tuple(cache_lens.shape) != (batch,) or cache_lens.is_floating_point():
        raise ValueError("cache_lens must be an integer tensor [B]")
    if tuple(positions.shape) != (batch, length) or positions.is_floating_point():
        raise ValueError("positions must be an integer tensor [B, L]")
    if tuple(new_valid.shape) != (batch, length) or new_valid.dtype != torch.bool:
        raise ValueError("new_valid must be a bool tensor [B, L]")
    if block_size < 0:
        raise ValueError(f"block_size must be >= 0 (0 = bidirectional), got {block_size}")


def block_attention(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                    block_size, scale=None, *, num_splits=None, slots=None):
    """Triton path. See the module docstring; `num_splits` overrides the split heuristic."""
    _check_inputs(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                  block_size, slots)
    batch, hq, length, dim = q.shape
    hkv = k_new.shape[1]
    group = hq // hkv
    cap = k_cache.shape[2]
    out = torch.empty((batch, hq, length, dim), dtype=q.dtype, device=q.device)
    if out.numel() == 0:
        return out
    scale = dim ** -0.5 if scale is None else float(scale)
    block_d = max(16, triton.next_power_of_2(dim))
    rows = group * length
    # All (group, query) rows of a kv head in one program when they fit in 128, so K/V is read
    # once per kv head (batch 1: 6 heads x 16 queries = 96 rows); else tiles of 64.
    block_m = max(16, triton.next_power_of_2(rows)) if rows <= 128 else 64
    block_n = 64 if block_d <= 128 else 32
    m_blocks = triton.cdiv(rows, block_m)
    programs = m_blocks * batch * hkv
    if num_splits is None:
        # Flash-decoding split when the grid is too small to fill the GPU; at most one split per
        # 128 cache slots so every split has real work.
        want = triton.cdiv(2 * num_sms(q.device), programs)
        num_splits = max(1, min(want, cap // 128))
    num_splits = max(1, int(num_splits))
    final = num_splits == 1
    n_flat = batch * hq * length
    if final:
        o_part, lse_part = out, out  # unused
    else:
        o_part = torch.empty((num_splits, n_flat, dim), dtype=torch.float32, device=q.device)
        lse_part = torch.empty((num_splits, n_flat), dtype=torch.float32, device=q.device)
    new_valid_u8 = new_valid.view(torch.uint8)
    _block_attn_kernel[(m_blocks, batch * hkv, num_splits)](
        q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid_u8,
        slots if slots is not None else cache_lens, out, o_part, lse_part,
        *q.stride(), *k_new.stride(), *v_new.stride(), *k_cache.stride(), *v_cache.stride(),
        *out.stride(), *positions.stride(), *new_valid_u8.stride(), cache_lens.stride(0),
        slots.stride(0) if slots is not None else 0,
        hq, hkv, length, group, dim, scale * _LOG2E, int(block_size), num_splits, n_flat,
        CAUSAL=block_size > 0, FINAL=final, IEEE=q.dtype == torch.float32,
        UPCAST=q.device.type != "cuda", HAS_SLOTS=slots is not None,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=block_d,
        num_warps=8 if block_m * block_d >= 128 * 128 else 4,
    )
    if not final:
        _block_attn_combine_kernel[(n_flat,)](
            o_part, lse_part, out, *out.stride(), hq, length, dim, n_flat, num_splits,
            SPLITS_PAD=triton.next_power_of_2(num_splits), BLOCK_D=block_d,
        )
    return out


def visibility_mask(cache_lens, positions, new_valid, block_size, cache_capacity):
    """Bool [B, L, T + L]: which of cat(cache[:T], new) each query sees (the math above)."""
    batch, length = positions.shape
    slots = torch.arange(cache_capacity, device=positions.device)
    cache_vis = slots[None, :] < cache_lens.to(positions.device)[:, None]  # [B, T]
    new_vis = new_valid[:, None, :].expand(batch, length, length)  # [B, L(query), L(key)]
    if block_size > 0:
        blk = positions // block_size  # [B, L]
        new_vis = new_vis & (blk[:, None, :] <= blk[:, :, None])
    return torch.cat([cache_vis[:, None, :].expand(batch, length, cache_capacity), new_vis], -1)


def block_attention_ref(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                        block_size, scale=None, *, upcast=True, slots=None):
    """Plain PyTorch with an explicit mask. upcast=False keeps q's dtype (a low-precision
    baseline for tests); the default computes in fp32 and casts the output to q's dtype."""
    _check_inputs(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                  block_size, slots)
    if slots is not None:
        k_cache, v_cache = k_cache[slots], v_cache[slots]
    batch, hq, length, dim = q.shape
    group = hq // k_new.shape[1]
    scale = 1.0 / math.sqrt(dim) if scale is None else float(scale)
    mask = visibility_mask(cache_lens, positions, new_valid, block_size, k_cache.shape[2])
    k = torch.cat([k_cache, k_new], dim=2).repeat_interleave(group, dim=1)  # [B, Hq, T+L, D]
    v = torch.cat([v_cache, v_new], dim=2).repeat_interleave(group, dim=1)
    qq = q
    if upcast:
        qq, k, v = q.float(), k.float(), v.float()
    scores = (qq @ k.transpose(-1, -2)) * scale  # [B, Hq, L, T+L]
    scores = scores.masked_fill(~mask[:, None], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    probs = torch.where(mask[:, None].any(-1, keepdim=True), probs, torch.zeros_like(probs))
    return (probs.to(v.dtype) @ v).to(q.dtype)
