"""Per-row host values of one denoising pass, packed into two device tensors.

The runner needs ~20 small per-row numbers each pass (slot, geometry, policy id, schedule). Built
one `torch.tensor` call each for ints and floats instead of one per column: on small models the
per-pass Python and tensor-creation cost is a large share of the pass. Knows nothing about the
model; reads Sequence properties only.
"""

from __future__ import annotations

import torch

from diffvoice.engine.policies import POLICY_IDS
from diffvoice.engine.sequence import Sequence

INT_COLS = ("slot", "q_start", "q_end", "first", "visible", "writes", "d_start", "d_end",
            "prompt_len", "gen_end", "steps_left", "policy", "stop", "eos_fill", "final",
            "full_vocab", "first_token", "k_fixed", "block_start")
FLOAT_COLS = ("threshold", "entropy_bound", "dream_f")
INT = {name: i for i, name in enumerate(INT_COLS)}
FLOAT = {name: i for i, name in enumerate(FLOAT_COLS)}


def row_ints(r: Sequence) -> list[int]:
    rules = r.rules
    sdar = r.params.policy in ("sdar_static", "sdar_dynamic")
    return [r.slot, r.q_start, r.q_end, r.first_computed, r.visible_cache, int(r.writes),
            r.d_start, r.d_end, r.prompt_len, r.gen_end, r.steps_left,
            POLICY_IDS[r.params.policy or "low_confidence"], int(not r.params.ignore_eos),
            int(rules.eos_fill),
            int(rules.final_commits), int(rules.full_vocab_confidence), int(r.first_token_due),
            r.k_fixed if sdar else 0, r.block_start]


def row_floats(r: Sequence) -> list[float]:
    dream = r.rules.dream_schedule
    tau = 0.9 if r.params.threshold is None else r.params.threshold
    return [tau, r.params.entropy_bound, r.dream_f if dream else 1.0]


def pack(rows: list[Sequence], device: torch.device) -> tuple[torch.Tensor, torch.Tensor,
                                                                 list[list[int]]]:
    """-> (ints [B, len(INT_COLS)] int64, floats [B, len(FLOAT_COLS)] f32, the ints on the host)."""
    host = [row_ints(r) for r in rows]
    ints = torch.tensor(host, dtype=torch.long, device=device)
    floats = torch.tensor([row_floats(r) for r in rows], dtype=torch.float32, device=device)
    return ints, floats, host
