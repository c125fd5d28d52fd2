"""Fused unmask-confidence: argmax token, its softmax probability and the entropy, per position.

Math, per row x = logits_row / temperature (fp32; temperature 0 means greedy and uses 1.0):
    token   = argmax_v x_v                      (first index on ties, like torch.argmax)
    m       = max_v x_v,  s = sum_v e^(x_v - m),  t = sum_v (x_v - m) e^(x_v - m)
    prob    = softmax(x)[token] = e^(m - m) / s = 1 / s
    entropy = -sum_v p_v log p_v = log s - t / s
One pass over V with an online max: when the running max moves from m to m', alpha = e^(m - m'),
s <- alpha s,  t <- alpha (t + (m - m') s). Entries equal to -inf contribute nothing. The kernel
keeps s, t and the argmax per lane of a tile and folds the lanes once at the end. The softmax is
never materialised. For small row counts (batch 1) the vocabulary is split across programs; each
split keeps its own (m, s, t, argmax) and a second tiny kernel merges them with the same rescaling.

Inputs: logits [B, L, V] (any float dtype, last dim contiguous). shift=True (Dream / Fast-dLLM v2
logit shift): slot i is predicted by logits[:, i-1] and slot 0 by prev_logits [B, V]; the kernel
indexes the rows that way, nothing is copied. rows [N] int64 (optional): flat indices into B*L,
only those positions are computed and the outputs are [N] instead of [B, L]. Row indices are not
range-checked on the device (no host sync); out-of-range rows are undefined behaviour.
Outputs: token int64, prob float32, entropy float32 (None unless need_entropy).

This module knows nothing about unmasking policies or the engine; kernels/ops.py dispatches.
"""

from __future__ import annotations

import torch

from diffvoice.kernels._triton import num_sms, tl, triton

_MAX_BLOCK_V = 4096


@triton.jit
def _unmask_partial_kernel(
    logits_ptr, prev_ptr, rows_ptr,
    m_part_ptr, s_part_ptr, t_part_ptr, idx_part_ptr,
    token_ptr, prob_ptr, ent_ptr,
    L, V, stride_b, stride_l, stride_prev_b, stride_rows, inv_temp, chunk, num_splits,
    HAS_ROWS: tl.constexpr, SHIFT: tl.constexpr, NEED_ENTROPY: tl.constexpr,
    FINAL: tl.constexpr, BLOCK_V: tl.constexpr,
):
    n = tl.program_id(0)
    split = tl.program_id(1)
    if HAS_ROWS:
        r = tl.load(rows_ptr + n * stride_rows)
    else:
        r = n.to(tl.int64)
    b = r // L
    i = r % L
    # Row of logits that predicts slot (b, i); with SHIFT slot 0 reads prev_logits[b].
    if SHIFT:
        if i == 0:
            row_ptr = prev_ptr + b * stride_prev_b
        else:
            row_ptr = logits_ptr + b * stride_b + (i - 1) * stride_l
    else:
        row_ptr = logits_ptr + b * stride_b + i * stride_l

    start = split * chunk
    end = tl.minimum(start + chunk, V)
    # Per-lane sums and argmax with one shared running max m: the loop's only cross-lane
    # reduction is the tile max; lanes are folded together once, after the loop.
    m = -float("inf")
    s_lane = tl.zeros([BLOCK_V], tl.float32)
    t_lane = tl.zeros([BLOCK_V], tl.float32)
    best_val = tl.full([BLOCK_V], -float("inf"), tl.float32)
    best_idx = tl.zeros([BLOCK_V], tl.int32) + start
    for off in range(start, end, BLOCK_V):
        cols = off + tl.arange(0, BLOCK_V)
        x = tl.load(row_ptr + cols, mask=cols < end, other=-float("inf")).to(tl.float32)
        x = x * inv_temp  # [BLOCK_V]
        better = x > best_val  # strict: each lane keeps its first maximum
        best_val = tl.where(better, x, best_val)
        best_idx = tl.where(better, cols, best_idx)
        m_new = tl.maximum(m, tl.max(x, axis=0))
        m_safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        alpha = tl.exp(m - m_safe)  # 0 while nothing finite has been seen
        e = tl.exp(x - m_safe)  # 0 where x == -inf
        if NEED_ENTROPY:
            # where() before the products, so -inf * 0 never makes a NaN
            d = tl.where(x == -float("inf"), 0.0, x - m_safe)
            moved = tl.where(m == -float("inf"), 0.0, m - m_safe)  # s_lane is 0 when m = -inf
            t_lane = alpha * (t_lane + moved * s_lane) + d * e
        s_lane = s_lane * alpha + e
        m = m_new
    s = tl.sum(s_lane, axis=0)
    t = tl.sum(t_lane, axis=0)
    top = tl.max(best_val, axis=0)
    best = tl.min(tl.where(best_val == top, best_idx, V), axis=0)  # first index of the max

    if FINAL:
        tl.store(token_ptr + n, best.to(tl.int64))
        safe_s = tl.where(s > 0.0, s, 1.0)
        tl.store(prob_ptr + n, tl.where(s > 0.0, 1.0 / safe_s, 0.0))
        if NEED_ENTROPY:
            tl.store(ent_ptr + n, tl.where(s > 0.0, tl.log(safe_s) - t / safe_s, 0.0))
    else:
        k = n * num_splits + split
        tl.store(m_part_ptr + k, m)
        tl.store(s_part_ptr + k, s)
        tl.store(t_part_ptr + k, t)
        tl.store(idx_part_ptr + k, best)


@triton.jit
def _unmask_combine_kernel(
    m_part_ptr, s_part_ptr, t_part_ptr, idx_part_ptr,
    token_ptr, prob_ptr, ent_ptr, num_splits,
    NEED_ENTROPY: tl.constexpr, SPLITS_PAD: tl.constexpr,
):
    n = tl.program_id(0)
    ks = tl.arange(0, SPLITS_PAD)
    valid = ks < num_splits
    base = n * num_splits
    m_k = tl.load(m_part_ptr + base + ks, mask=valid, other=-float("inf"))
    s_k = tl.load(s_part_ptr + base + ks, mask=valid, other=0.0)
    idx_k = tl.load(idx_part_ptr + base + ks, mask=valid, other=0)
    m, k_best = tl.max(m_k, axis=0, return_indices=True)  # earliest split wins ties
    m_safe = tl.where(m == -float("inf"), 0.0, m)
    w = tl.exp(m_k - m_safe)  # [SPLITS_PAD]; 0 for empty splits
    s = tl.sum(s_k * w, axis=0)
    token = tl.sum(tl.where(ks == k_best, idx_k, 0), axis=0)
    tl.store(token_ptr + n, token.to(tl.int64))
    safe_s = tl.where(s > 0.0, s, 1.0)
    tl.store(prob_ptr + n, tl.where(s > 0.0, 1.0 / safe_s, 0.0))
    if NEED_ENTROPY:
        t_k = tl.load(t_part_ptr + base + ks, mask=valid, other=0.0)
        moved = (tl.where(s_k > 0.0, m_k, m_safe) - m_safe) * s_k
        t = tl.sum(w * (t_k + moved), axis=0)
        tl.store(ent_ptr + n, tl.where(s > 0.0, tl.log(safe_s) - t / safe_s, 0.0))


def _check_inputs(logits, prev_logits, shift, temperature, rows):
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, L, V], got shape {tuple(logits.shape)}")
    if not logits.is_floating_point():
        raise ValueError(f"logits must be floating point, got {logits.dtype}")
    batch, _, vocab = logits.shape
    if shift:
        if prev_logits is None:
            raise ValueError("shift=True needs prev_logits [B, V] (the logits before slot 0)")
        if tuple(prev_logits.shape) != (batch, vocab):
            raise ValueError(f"prev_logits must be [B, V] = {(batch, vocab)}, "
                             f"got {tuple(prev_logits.shape)}")
        if prev_logits.dtype != logits.dtype or prev_logits.device != logits.device:
            raise ValueError("prev_logits must match logits in dtype and device")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (0 means greedy), got {temperature}")
    if rows is not None:
        if rows.dim() != 1 or rows.dtype != torch.int64 or rows.device != logits.device:
            raise ValueError("rows must be a 1-D int64 tensor on the logits' device")
    return 1.0 if temperature == 0 else 1.0 / float(temperature)


def unmask_confidence(logits, prev_logits=None, shift=False, temperature=1.0,
                      need_entropy=False, rows=None, *, num_splits=None, block_v=None):
    """Triton path. See the module docstring; `num_splits`/`block_v` override the heuristics."""
    inv_temp = _check_inputs(logits, prev_logits, shift, temperature, rows)
    if logits.stride(-1) != 1 or (shift and prev_logits.stride(-1) != 1):
        raise ValueError("logits and prev_logits need a contiguous last (vocabulary) dim")
    batch, length, vocab = logits.shape
    device = logits.device
    n_rows = rows.numel() if rows is not None else batch * length
    token = torch.empty(n_rows, dtype=torch.int64, device=device)
    prob = torch.empty(n_rows, dtype=torch.float32, device=device)
    entropy = torch.empty(n_rows, dtype=torch.float32, device=device) if need_entropy else None
    out_shape = (n_rows,) if rows is not None else (batch, length)
    if n_rows == 0:
        return (token.view(out_shape), prob.view(out_shape),
                entropy.view(out_shape) if need_entropy else None)

    if block_v is None:
        block_v = min(_MAX_BLOCK_V, triton.next_power_of_2(vocab))
    if num_splits is None:
        # Enough programs to fill the GPU (about 2 per SM), at least 4 tiles per split.
        want = triton.cdiv(2 * num_sms(device), n_rows)
        num_splits = max(1, min(want, vocab // (4 * block_v)))
    chunk = triton.cdiv(triton.cdiv(vocab, num_splits), block_v) * block_v
    num_splits = triton.cdiv(vocab, chunk)  # no empty splits
    final = num_splits == 1

    prev = prev_logits if shift else logits  # unused when not shifting
    rows_arg = rows if rows is not None else token  # unused pointer when HAS_ROWS is False
    ent_arg = entropy if need_entropy else prob
    if final:
        m_part = s_part = t_part = prob
        idx_part = token
    else:
        m_part = torch.empty(n_rows * num_splits, dtype=torch.float32, device=device)
        s_part = torch.empty_like(m_part)
        t_part = torch.empty_like(m_part)
        idx_part = torch.empty(n_rows * num_splits, dtype=torch.int32, device=device)
    warps = 8 if block_v >= 2048 else 4
    _unmask_partial_kernel[(n_rows, num_splits)](
        logits, prev, rows_arg, m_part, s_part, t_part, idx_part, token, prob, ent_arg,
        length, vocab, logits.stride(0), logits.stride(1), prev.stride(0),
        rows.stride(0) if rows is not None else 0, inv_temp, chunk,
        num_splits, HAS_ROWS=rows is not None, SHIFT=bool(shift),
        NEED_ENTROPY=bool(need_entropy), FINAL=final, BLOCK_V=block_v, num_warps=warps,
    )
    if not final:
        _unmask_combine_kernel[(n_rows,)](
            m_part, s_part, t_part, idx_part, token, prob, ent_arg, num_splits,
            NEED_ENTROPY=bool(need_entropy), SPLITS_PAD=triton.next_power_of_2(num_splits),
        )
    return (token.view(out_shape), prob.view(out_shape),
            entropy.view(out_shape) if need_entropy else None)


def unmask_confidence_ref(logits, prev_logits=None, shift=False, temperature=1.0,
                          need_entropy=False, rows=None):
    """Plain PyTorch: same contract as `unmask_confidence`, fp32 math via logsumexp."""
    inv_temp = _check_inputs(logits, prev_logits, shift, temperature, rows)
    batch, length, vocab = logits.shape
    if shift:
        logits = torch.cat([prev_logits[:, None, :], logits[:, :-1, :]], dim=1)
    x = logits.reshape(batch * length, vocab)  # [B*L, V]
    if rows is not None:
        x = x[rows]  # [N, V]
    x = x.float() * inv_temp
    token = x.argmax(dim=-1)
    log_z = torch.logsumexp(x, dim=-1)  # [N]
    prob = torch.exp(x.gather(-1, token[:, None])[:, 0] - log_z)
    entropy = None
    if need_entropy:
        log_p = x - log_z[:, None]
        p = torch.exp(log_p)
        entropy = torch.where(p > 0, -p * log_p, torch.zeros_like(p)).sum(dim=-1)
    out_shape = (x.shape[0],) if rows is not None else (batch, length)
    return (token.view(out_shape), prob.view(out_shape),
            entropy.view(out_shape) if need_entropy else None)
