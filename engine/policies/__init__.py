"""Unmasking policies: which predicted slots to commit in this denoising pass.

Each policy is a function of batch tensors only (no per-row Python, no host sync):
    commit(conf [B, W] f32, entropy [B, W] f32 | None, maskable [B, W] bool, knobs: PolicyKnobs)
        -> commit mask [B, W] bool, a subset of maskable; every row with a maskable slot commits
           at least one. The families' own rules (policies/reference.py) differ where their
           authors' code does: SDAR's top-k may select decoded slots of the block, Dream's k may
           be 0.
The registry is an explicit dict; `POLICY_IDS` gives each a small integer for per-row selection.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffvoice.engine.policies.entropy_bounded import commit_entropy_bounded
from diffvoice.engine.policies.low_confidence import commit_low_confidence
from diffvoice.engine.policies.reference import (
    commit_dream_entropy,
    commit_dream_topk,
    commit_sdar_dynamic,
    commit_sdar_static,
    commit_threshold_ge,
)
from diffvoice.engine.policies.threshold import commit_threshold


@dataclass
class PolicyKnobs:
    steps_left: torch.Tensor  # [B] int64: passes left in this block (low_confidence)
    threshold: torch.Tensor  # [B] f32 (threshold)
    entropy_bound: torch.Tensor  # [B] f32 (entropy)
    # the families' own schedules (engine.policies.reference); None where no row needs them
    k_fixed: torch.Tensor | None = None  # [B] int64: SDAR's schedule count for this pass
    k_host: list[int] | None = None  # the same on the host (top-k grouped by k)
    block: torch.Tensor | None = None  # [B, W] bool: the slots of the row's decode block
    dream_f: torch.Tensor | None = None  # [B] f32: Dream's 1 - s/t for this pass


POLICIES = {
    "low_confidence": commit_low_confidence,
    "threshold": commit_threshold,
    "entropy": commit_entropy_bounded,
    "sdar_static": commit_sdar_static,
    "sdar_dynamic": commit_sdar_dynamic,
    "threshold_ge": commit_threshold_ge,
    "dream_topk": commit_dream_topk,
    "dream_entropy": commit_dream_entropy,
}
POLICY_IDS = {name: i for i, name in enumerate(POLICIES)}
NEEDS_ENTROPY = {"entropy", "dream_entropy"}


def commit_mixed(policy_names: list[str], policy_ids: torch.Tensor, conf: torch.Tensor,
                 entropy: torch.Tensor | None, maskable: torch.Tensor,
                 knobs: PolicyKnobs) -> torch.Tensor:
    """Apply each row's policy. `policy_names` are those present in the batch (host-known)."""
    if len(policy_names) == 1:
        return POLICIES[policy_names[0]](conf, entropy, maskable, knobs)
    out = torch.zeros_like(maskable)
    for name in policy_names:
        chosen = POLICIES[name](conf, entropy, maskable, knobs)
        out = torch.where((policy_ids == POLICY_IDS[name])[:, None], chosen, out)
    return out
