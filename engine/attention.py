"""Attention of a block's new tokens over a slot's cached prefix plus the new tokens themselves.

Visibility (identical for every family; only `block_size` differs):
  cached key t of row b   visible iff t < cache_lens[b]   (the cache only holds earlier positions)
  new key j of row b      visible iff key_valid[b, j] and (block_size == 0 or
                          positions[b, j] // block_size <= positions[b, i] // block_size)
On CUDA this routes to kernels.ops.block_attention (the Triton kernel); elsewhere it runs
PyTorch's fused scaled_dot_product_attention with an explicit mask, which is much faster on CPU
than the kernel's readable reference (tests check the two agree on random inputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from diffvoice.kernels.block_attention import visibility_mask
from diffvoice.kernels.dispatch import resolve_backend
from diffvoice.kernels.ops import block_attention


def uses_mask(device: torch.device) -> bool:
    """Does `attend` on this device take the explicit mask (build it once per pass)?"""
    return resolve_backend(device) != "triton"


def attention_mask(positions: torch.Tensor, key_valid: torch.Tensor, cache_lens: torch.Tensor,
                   cache_len_max: int, block_size: int) -> torch.Tensor:
    """Boolean mask [B, 1, L, Tc + L] (True = attend) over cat(cached keys, new keys): the
    kernel's visibility rule, plus self-attention for blind (padding) queries so SDPA stays
    finite on rows whose output is never used."""
    mask = visibility_mask(cache_lens, positions, key_valid, block_size, cache_len_max)
    n = positions.shape[1]
    blind = ~mask.any(-1)  # [B, L]
    eye = torch.eye(n, dtype=torch.bool, device=positions.device)[None] & blind[:, :, None]
    mask[:, :, cache_len_max:] |= eye
    return mask[:, None]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, k_cached: torch.Tensor,
           v_cached: torch.Tensor, cache_lens: torch.Tensor, positions: torch.Tensor,
           key_valid: torch.Tensor, block_size: int,
           mask: torch.Tensor | None = None) -> torch.Tensor:
    """q [B, L, Hq, D]; k/v [B, L, Hkv, D]; k_cached/v_cached [B, Hkv, Tc, D] -> [B, L, Hq, D].
    `mask`: attention_mask(...) of this pass when the caller built it once for every layer
    (only where uses_mask(device), so the backend is not looked up again per layer)."""
    if mask is None and resolve_backend(q.device) == "triton":
        out = block_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), k_cached,
                              v_cached, cache_lens, positions, key_valid, block_size)
        return out.transpose(1, 2)
    if mask is None:
        mask = attention_mask(positions, key_valid, cache_lens, k_cached.shape[2], block_size)
    keys = torch.cat((k_cached, k.transpose(1, 2)), dim=2)  # [B, Hkv, Tc + L, D]
    values = torch.cat((v_cached, v.transpose(1, 2)), dim=2)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, attn_mask=mask,
                                         enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)
