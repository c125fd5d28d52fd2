"""Fast-dLLM confidence-threshold parallel decoding: commit every slot with p > tau (>= 1)."""

from __future__ import annotations

import torch


def commit_threshold(conf, entropy, maskable, knobs):
    commit = maskable & (conf > knobs.threshold[:, None])
    return at_least_one(commit, conf, maskable)


def at_least_one(commit: torch.Tensor, conf: torch.Tensor, maskable: torch.Tensor) -> torch.Tensor:
    """Force the most confident maskable slot in rows that would otherwise commit nothing
    (conf: the confidences; slots that are not maskable rank below every maskable one)."""
    score = conf.masked_fill(~maskable, -1.0)
    best = torch.zeros_like(maskable).scatter_(-1, score.argmax(-1, keepdim=True), True)
    return commit | (best & maskable & ~commit.any(-1, keepdim=True))
