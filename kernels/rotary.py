"""Rotary position embedding, HF `rotate_half` convention (Qwen2, Llama, LLaDA, SDAR).

Math, for x [..., D] with halves x1 = x[:D/2], x2 = x[D/2:] and c = cos, s = sin at that position:
    rotate_half(x) = cat(-x2, x1)
    out = x * c + rotate_half(x) * s  =  cat(x1 c1 - x2 s1,  x2 c2 + x1 s2)
cos/sin come either per token, [B, L, D] (what HF's rotary module returns), or as tables
[P, D] indexed by positions [B, L] int64 (pass `positions`). The kernel computes in fp32 and
rounds once; the reference follows HF (cos/sin cast to x's dtype, products in x's dtype).
Shapes: q [B, Hq, L, D], k [B, Hk, L, D] (any strides, e.g. a transposed [B, L, H, D] view).
Returns new tensors (q_out, k_out), contiguous [B, H, L, D], same dtype as the inputs (k=None:
q alone, e.g. q and k stacked on the head axis, in one launch; k_out is None).
This module knows nothing about the model; kernels/ops.py dispatches.
"""

from __future__ import annotations

import torch

from diffvoice.kernels._triton import tl, triton


@triton.jit
def _rotary_kernel(
    x_ptr, cos_ptr, sin_ptr, pos_ptr, out_ptr,
    sx_b, sx_h, sx_l, sx_d, so_b, so_h, so_l, so_d, sc_0, sc_1, sc_d, sp_b, sp_l,
    H, L, HALF,
    HAS_POS: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALF: tl.constexpr,
):
    tok = tl.program_id(0).to(tl.int64)  # = b * L + l
    b = tok // L
    li = tok % L
    if HAS_POS:  # tables [P, D] indexed by positions[b, l]
        p = tl.load(pos_ptr + b * sp_b + li * sp_l)
        c_base = p * sc_0
    else:  # per-token [B, L, D]
        c_base = b * sc_0 + li * sc_1
    dd = tl.arange(0, BLOCK_HALF)
    d_ok = dd < HALF
    c1 = tl.load(cos_ptr + c_base + dd * sc_d, mask=d_ok, other=0.0).to(tl.float32)
    c2 = tl.load(cos_ptr + c_base + (dd + HALF) * sc_d, mask=d_ok, other=0.0).to(tl.float32)
    s1 = tl.load(sin_ptr + c_base + dd * sc_d, mask=d_ok, other=0.0).to(tl.float32)
    s2 = tl.load(sin_ptr + c_base + (dd + HALF) * sc_d, mask=d_ok, other=0.0).to(tl.float32)
    hh = tl.arange(0, BLOCK_H)
    mask = (hh < H)[:, None] & d_ok[None, :]  # [BLOCK_H, BLOCK_HALF]
    x_row = x_ptr + b * sx_b + li * sx_l + hh[:, None] * sx_h
    x1 = tl.load(x_row + dd[None, :] * sx_d, mask=mask, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + (dd[None, :] + HALF) * sx_d, mask=mask, other=0.0).to(tl.float32)
    o_row = out_ptr + b * so_b + li * so_l + hh[:, None] * so_h
    ty = out_ptr.dtype.element_ty
    tl.store(o_row + dd[None, :] * so_d, (x1 * c1[None, :] - x2 * s1[None, :]).to(ty), mask=mask)
    tl.store(o_row + (dd[None, :] + HALF) * so_d, (x2 * c2[None, :] + x1 * s2[None, :]).to(ty),
             mask=mask)


def _check_inputs(q, k, cos, sin, positions):
    for name, t in (("q", q), ("k", k)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be [B, H, L, D], got {tuple(t.shape)}")
    batch, _, length, dim = q.shape
    if (k.shape[0], k.shape[2], k.shape[3]) != (batch, length, dim):
        raise ValueError(f"k must be [B, Hk, L, D] matching q {tuple(q.shape)}, "
                         f"got {tuple(k.shape)}")
    if dim % 2:
        raise ValueError(f"head dim must be even for rotate_half, got {dim}")
    if cos.shape != sin.shape:
        raise ValueError("cos and sin must have the same shape")
    if positions is None:
        if tuple(cos.shape) != (batch, length, dim):
            raise ValueError(f"cos/sin must be [B, L, D] = {(batch, length, dim)} without "
                             f"positions, got {tuple(cos.shape)}")
    else:
        if cos.dim() != 2 or cos.shape[1] != dim:
            raise ValueError(f"with positions, cos/sin must be tables [P, D={dim}], "
                             f"got {tuple(cos.shape)}")
        if tuple(positions.shape) != (batch, length) or positions.is_floating_point():
            raise ValueError("positions must be an integer tensor [B, L]")


def _rotate_one(x, cos, sin, positions):
    batch, heads, length, dim = x.shape
    out = torch.empty((batch, heads, length, dim), dtype=x.dtype, device=x.device)
    if out.numel() == 0:
        return out
    if positions is None:
        sc = (cos.stride(0), cos.stride(1), cos.stride(2))
        pos, sp = cos, (0, 0)  # unused pointer
    else:
        sc = (cos.stride(0), 0, cos.stride(1))
        pos, sp = positions, positions.stride()
    _rotary_kernel[(batch * length,)](
        x, cos, sin, pos, out, *x.stride(), *out.stride(), *sc, *sp, heads, length, dim // 2,
        HAS_POS=positions is not None, BLOCK_H=triton.next_power_of_2(heads),
        BLOCK_HALF=triton.next_power_of_2(dim // 2),
    )
    return out


def rotary(q, k, cos, sin, positions=None):
    """Triton path: returns (q_out, k_out). See the module docstring. k=None rotates q alone
    (one launch for q and k stacked on the head axis) and returns (q_out, None)."""
    _check_inputs(q, q if k is None else k, cos, sin, positions)
    if sin.stride() != cos.stride():  # the kernel walks both with cos's strides
        cos, sin = cos.contiguous(), sin.contiguous()
    q_out = _rotate_one(q, cos, sin, positions)
    return q_out, (None if k is None else _rotate_one(k, cos, sin, positions))


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rotary_ref(q, k, cos, sin, positions=None):
    """Plain PyTorch, exactly HF's apply_rotary_pos_emb(unsqueeze_dim=1); k=None as rotary."""
    _check_inputs(q, q if k is None else k, cos, sin, positions)
    if positions is not None:
        cos, sin = cos[positions], sin[positions]  # [B, L, D]

    def rotate(x):
        c, s = cos.to(x.dtype)[:, None], sin.to(x.dtype)[:, None]  # [B, 1, L, D]
        return (x * c + rotate_half(x) * s).contiguous()

    return rotate(q), (None if k is None else rotate(k))
