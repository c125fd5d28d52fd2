"""Unmasking policies: which predicted slots to commit in this denoising pass.

Each policy is a function of batch tensors only (no per-row Python, no host sync):
    commit(conf [B, W] f32, entropy [B, W] f32 | None, maskable [B, W] bool, knobs: PolicyKnobs)
        -> commit mask [B, W] bool, a subset of maskable; every row with a maskable slot commits
           at least one.
The registry is an explicit dict; `POLICY_IDS` gives each a small integer for per-row selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from engine.policies.entropy_bounded import commit_entropy_bounded
from engine.policies.low_confidence import commit_low_confidence
from engine.policies.threshold import commit_threshold


@dataclass
class PolicyKnobs:
    steps_left: torch.Tensor  # [B] int64: passes left in this block (low_confidence)
    threshold: torch.Tensor  # [B] f32 (threshold)
    entropy_bound: torch.Tensor  # [B] f32 (entropy)


POLICIES = {
    "low_confidence": commit_low_confidence,
    "threshold": commit_threshold,
    "entropy": commit_entropy_bounded,
}
POLICY_IDS = {name: i for i, name in enumerate(POLICIES)}
NEEDS_ENTROPY = {"entropy"}


def commit_mixed(policy_names: list[str], policy_ids: torch.Tensor, conf: torch.Tensor,
                 entropy: torch.Tensor | None, maskable: torch.Tensor,
                 knobs: PolicyKnobs) -> torch.Tensor:
    """Apply each row's policy. `policy_names` are those present in the batch (host-known)."""
    out = torch.zeros_like(maskable)
    for name in policy_names:
        chosen = POLICIES[name](conf, entropy, maskable, knobs)
        if len(policy_names) == 1:
            return chosen
        out = torch.where((policy_ids == POLICY_IDS[name])[:, None], chosen, out)
    return out
