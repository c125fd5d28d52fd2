"""LLaDA low-confidence remasking with a fixed number of passes per block (the reference schedule).

With n masked slots and s passes left, commit the k = ceil(n / s) most confident ones. Over a block
this reproduces LLaDA's `get_num_transfer_tokens` split (n // steps each, the remainder first).
"""

from __future__ import annotations

import torch


def commit_low_confidence(conf, entropy, maskable, knobs):
    n_masked = maskable.sum(-1)  # [B]
    k = torch.div(n_masked + knobs.steps_left - 1, knobs.steps_left.clamp(min=1),
                  rounding_mode="floor")
    score = torch.where(maskable, conf, torch.full_like(conf, -1.0))
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(
        order.shape[-1], device=order.device).expand_as(order))
    return maskable & (rank < k[:, None])
