"""EB-sampler (Ben-Hamu et al. 2025): commit slots in ascending-entropy order while the summed
entropy of the chosen set, less its largest member, stays <= gamma. The first slot always passes."""

from __future__ import annotations

import torch


def commit_entropy_bounded(conf, entropy, maskable, knobs):
    ent = torch.where(maskable, entropy, torch.full_like(entropy, float("inf")))
    sorted_ent, order = ent.sort(dim=-1, stable=True)
    budget = sorted_ent.cumsum(-1) - sorted_ent  # entropy of the set below each candidate
    keep_sorted = budget <= knobs.entropy_bound[:, None]  # inf - inf = nan -> False
    keep = torch.zeros_like(maskable).scatter_(-1, order, keep_sorted)
    return keep & maskable
