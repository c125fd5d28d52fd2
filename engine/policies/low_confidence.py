"""LLaDA low-confidence remasking with a fixed number of passes per block (the reference schedule).

With n masked slots and s passes left, commit the k = ceil(n / s) most confident ones. Over a block
this reproduces LLaDA's `get_num_transfer_tokens` split (n // steps each, the remainder first).
"""

from __future__ import annotations

import torch

from diffvoice.engine.policies.reference import top_k_rows


def commit_low_confidence(conf, entropy, maskable, knobs):
    n_masked = maskable.sum(-1)  # [B]
    k = torch.div(n_masked + knobs.steps_left - 1, knobs.steps_left.clamp(min=1),
                  rounding_mode="floor")
    return top_k_rows(conf.masked_fill(~maskable, -1.0), maskable, k)
