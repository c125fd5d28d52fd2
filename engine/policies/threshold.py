"""Fast-dLLM confidence-threshold parallel decoding: commit every slot with p > tau (>= 1)."""

from __future__ import annotations

import torch


def commit_threshold(conf, entropy, maskable, knobs):
    commit = maskable & (conf > knobs.threshold[:, None])
    score = torch.where(maskable, conf, torch.full_like(conf, -1.0))
    return at_least_one(commit, score, maskable)


def at_least_one(commit: torch.Tensor, score: torch.Tensor, maskable: torch.Tensor) -> torch.Tensor:
    """Force the best-scoring maskable slot in rows that would otherwise commit nothing."""
    best = torch.zeros_like(maskable).scatter_(-1, score.argmax(-1, keepdim=True), True)
    return commit | (best & maskable & ~commit.any(-1, keepdim=True))
