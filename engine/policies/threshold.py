"""Fast-dLLM confidence-threshold parallel decoding: commit every slot with p > tau (>= 1)."""

from __future__ import annotations

import torch


def commit_threshold(conf, entropy, maskable, knobs):
    commit = maskable & (conf > knobs.threshold[:, None])
    return at_least_one(commit, conf.masked_fill(~maskable, -1.0), maskable)


def at_least_one(commit: torch.Tensor, score: torch.Tensor, maskable: torch.Tensor) -> torch.Tensor:
    """Force the best-scoring maskable slot in rows that would otherwise commit nothing."""
    if commit.shape[0] == 1 and commit.device.type == "cpu":  # one row: decide on the host
        if bool(commit.any()) or not bool(maskable.any()):
            return commit
        return commit.clone().index_fill_(-1, score[0].argmax(-1, keepdim=True), True)
    best = torch.zeros_like(maskable).scatter_(-1, score.argmax(-1, keepdim=True), True)
    return commit | (best & maskable & ~commit.any(-1, keepdim=True))
