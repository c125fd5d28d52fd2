"""Fused RMSNorm with an optional residual add (Qwen2 / Llama convention, as in HF).

Math, per row of the last dim H (eps inside the root):
    h        = x + residual              (in x's dtype, rounded once; h = x when no residual)
    normed   = w * to_dtype( h * rsqrt(mean(h^2) + eps) )    (statistics in fp32)
Returns (normed, h): h is the new residual stream, None when no residual was given. The cast to
x's dtype before the weight product follows HF's Qwen2RMSNorm, so both paths round alike.
One program per row reads x (and residual) once and writes normed (and h) once.
Shapes: x, residual [..., H], weight [H]; outputs keep x's shape and dtype.
This module knows nothing about the model; kernels/ops.py dispatches.
"""

from __future__ import annotations

import torch

from diffvoice.kernels._triton import tl, triton


@triton.jit
def _rmsnorm_kernel(
    x_ptr, res_ptr, w_ptr, out_ptr, res_out_ptr, H, eps,
    HAS_RES: tl.constexpr, BLOCK_H: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_H)
    ok = cols < H
    x = tl.load(x_ptr + row * H + cols, mask=ok, other=0.0)
    if HAS_RES:
        r = tl.load(res_ptr + row * H + cols, mask=ok, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(x_ptr.dtype.element_ty)  # one rounding
        tl.store(res_out_ptr + row * H + cols, x, mask=ok)
    h = x.to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / H + eps)
    normed = (h * inv_rms).to(x_ptr.dtype.element_ty).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * H + cols, (normed * w).to(out_ptr.dtype.element_ty), mask=ok)


def _check_inputs(x, weight, residual, eps):
    if x.dim() < 1 or weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must be [H] with H = x.shape[-1]; got x {tuple(x.shape)}, "
                         f"weight {tuple(weight.shape)}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype):
        raise ValueError("residual must match x in shape and dtype")
    if not eps > 0:
        raise ValueError(f"eps must be > 0, got {eps}")


def rmsnorm(x, weight, residual=None, eps=1e-6):
    """Triton path: returns (normed, new_residual or None). See the module docstring."""
    _check_inputs(x, weight, residual, eps)
    hidden = x.shape[-1]
    x = x if x.is_contiguous() else x.contiguous()  # rows of H, back to back
    out = torch.empty_like(x)
    res_out = None
    res = x  # unused pointer when there is no residual
    if residual is not None:
        res = residual if residual.is_contiguous() else residual.contiguous()
        res_out = torch.empty_like(x)
    rows = x.numel() // hidden if hidden else 0
    if rows > 0:
        block_h = triton.next_power_of_2(hidden)
        _rmsnorm_kernel[(rows,)](
            x, res, weight if weight.is_contiguous() else weight.contiguous(), out,
            res_out if res_out is not None else out, hidden,
            float(eps), HAS_RES=residual is not None, BLOCK_H=block_h,
            num_warps=8 if block_h >= 4096 else 4,
        )
    return out, res_out


def rmsnorm_ref(x, weight, residual=None, eps=1e-6):
    """Plain PyTorch, HF Qwen2RMSNorm semantics: returns (normed, new_residual or None)."""
    _check_inputs(x, weight, residual, eps)
    h = x if residual is None else (x.float() + residual.float()).to(x.dtype)
    h32 = h.float()
    normed = h32 * torch.rsqrt(h32.pow(2).mean(-1, keepdim=True) + eps)
    out = (weight.float() * normed.to(x.dtype).float()).to(x.dtype)
    return out, (h if residual is not None else None)
