"""Rotary inverse frequencies for the rope scalings found in real checkpoints.

`inv_freq(head_dim, theta, scaling, max_position_embeddings)` returns (inv_freq [head_dim / 2],
attention_factor): the per-pair rotation speeds and the factor that multiplies cos/sin. `scaling`
is a config.json `rope_scaling` dict (None = plain RoPE) of rope_type "linear", "llama3" or "yarn",
computed as transformers' modeling_rope_utils does (tested against it). Length-dependent scalings
("dynamic", "longrope") are refused by engine.hf_fields: their frequencies change with the sequence
length, which a persistent KV cache cannot follow. Knows nothing about models or tensors' layout.
"""

from __future__ import annotations

import math

import torch


def _plain(head_dim: int, theta: float, device) -> torch.Tensor:
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64, device=device).float() / head_dim
    return 1.0 / (theta ** exponents)


def _llama3(base: torch.Tensor, s: dict, max_pos: int) -> torch.Tensor:
    factor = float(s["factor"])
    low, high = float(s["low_freq_factor"]), float(s["high_freq_factor"])
    old_len = float(s.get("original_max_position_embeddings") or max_pos)
    wavelen = 2 * math.pi / base
    scaled = torch.where(wavelen > old_len / low, base / factor, base)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
    return torch.where(medium, smoothed, scaled)


def _yarn(head_dim: int, theta: float, s: dict, max_pos: int,
          device) -> tuple[torch.Tensor, float]:
    old_len = s.get("original_max_position_embeddings") or max_pos
    factor = s.get("factor") or max_pos / old_len

    def mscale(scale: float, m: float = 1.0) -> float:
        return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

    attention = s.get("attention_factor")
    if attention is None:
        if s.get("mscale") and s.get("mscale_all_dim"):
            attention = mscale(factor, s["mscale"]) / mscale(factor, s["mscale_all_dim"])
        else:
            attention = mscale(factor)
    beta_fast, beta_slow = s.get("beta_fast") or 32, s.get("beta_slow") or 1

    def correction_dim(rotations: float) -> float:
        return (head_dim * math.log(old_len / (rotations * 2 * math.pi))) / (2 * math.log(theta))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if s.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, head_dim - 1)
    if low == high:
        high += 0.001
    pairs = torch.arange(head_dim // 2, dtype=torch.float32, device=device)
    ramp = ((pairs - low) / (high - low)).clamp(0, 1)
    pos_freqs = theta ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim)
    extrapolation = 1 - ramp
    inv = (1.0 / (factor * pos_freqs)) * (1 - extrapolation) + (1.0 / pos_freqs) * extrapolation
    return inv, float(attention)


def inv_freq(head_dim: int, theta: float, scaling: dict | None, max_position_embeddings: int,
             device: torch.device | str | None = None) -> tuple[torch.Tensor, float]:
    """(inv_freq [head_dim // 2] float32 on `device`, attention_factor) for one rope configuration.
    Only device-side tensor ops: safe inside CUDA-graph capture."""
    kind = None if scaling is None else scaling.get("rope_type", scaling.get("type", "default"))
    if kind in (None, "default"):
        return _plain(head_dim, theta, device), 1.0
    if kind == "linear":
        return _plain(head_dim, theta, device) / float(scaling["factor"]), 1.0
    if kind == "llama3":
        return _llama3(_plain(head_dim, theta, device), scaling, max_position_embeddings), 1.0
    if kind == "yarn":
        return _yarn(head_dim, theta, scaling, max_position_embeddings, device)
    raise ValueError(f"rope_scaling type {kind!r} is not supported (linear, llama3, yarn)")
