"""The kernels the engine calls: each picks Triton or the PyTorch reference (kernels/dispatch.py).

Every op takes `backend=None | "auto" | "triton" | "torch"` (None: $DIFFVOICE_KERNELS, else
"auto" = Triton on CUDA tensors, the reference elsewhere). Signatures, shapes and math live in the
kernel modules' docstrings; the two paths share one contract and are tested against each other.
None of these syncs with the host, so they are safe inside a captured CUDA graph (the Triton
wrappers allocate their outputs; under capture that memory comes from the graph's pool).
"""

from __future__ import annotations

from diffvoice.kernels.block_attention import block_attention as _block_attention_triton
from diffvoice.kernels.block_attention import block_attention_ref
from diffvoice.kernels.dispatch import resolve_backend
from diffvoice.kernels.rmsnorm import rmsnorm as _rmsnorm_triton
from diffvoice.kernels.rmsnorm import rmsnorm_ref
from diffvoice.kernels.rotary import rotary as _rotary_triton
from diffvoice.kernels.rotary import rotary_ref
from diffvoice.kernels.unmask_confidence import unmask_confidence as _unmask_confidence_triton
from diffvoice.kernels.unmask_confidence import unmask_confidence_ref

__all__ = ["block_attention", "rmsnorm", "rotary", "unmask_confidence"]


def unmask_confidence(logits, prev_logits=None, shift=False, temperature=1.0,
                      need_entropy=False, rows=None, *, backend=None):
    """-> (token int64, prob float32, entropy float32 | None), each [B, L] (or [N] with rows).

    logits [B, L, V]; shift=True reads slot i from logits[:, i-1] and slot 0 from prev_logits
    [B, V]; temperature 0 means greedy (confidences at temperature 1); rows [N] int64 flat
    indices into B*L select positions.
    """
    if resolve_backend(logits.device, backend) == "triton":
        fn = _unmask_confidence_triton
    else:
        fn = unmask_confidence_ref
    return fn(logits, prev_logits, shift, temperature, need_entropy, rows)


def block_attention(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid,
                    block_size, scale=None, *, slots=None, backend=None):
    """-> out [B, Hq, L, D] in q's dtype.

    q [B, Hq, L, D]; k_new/v_new [B, Hkv, L, D]; k_cache/v_cache [B, Hkv, T, D] with the first
    cache_lens[b] slots valid, or with slots [B] int pools [S, Hkv, T, D] whose slot slots[b]
    is row b's cache; positions [B, L] int64; new_valid [B, L] bool; block_size 0 =
    bidirectional among new keys, > 0 = block-causal over absolute positions.
    """
    if resolve_backend(q.device, backend) == "triton":
        fn = _block_attention_triton
    else:
        fn = block_attention_ref
    return fn(q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid, block_size,
              scale, slots=slots)


def rmsnorm(x, weight, residual=None, eps=1e-6, *, backend=None):
    """-> (normed, new_residual | None); with residual: h = x + residual, normed = RMSNorm(h)."""
    fn = _rmsnorm_triton if resolve_backend(x.device, backend) == "triton" else rmsnorm_ref
    return fn(x, weight, residual, eps)


def rotary(q, k, cos, sin, positions=None, *, backend=None):
    """-> (q_out, k_out), contiguous [B, H, L, D]. cos/sin [B, L, D], or tables [P, D] with
    positions [B, L]. k=None: q alone (k_out None)."""
    fn = _rotary_triton if resolve_backend(q.device, backend) == "triton" else rotary_ref
    return fn(q, k, cos, sin, positions)
