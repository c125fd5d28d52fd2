"""Per-row host values of one denoising pass: the geometry key and the per-pass schedule.

`row_key(seq)` is everything about a row that stays fixed for the passes of a block (slot,
geometry, rules, policy, threshold): engine.pass_plan caches the pass's device tensors under the
tuple of the rows' keys. `row_pass(seq)` is what changes every pass (the schedule: passes left,
SDAR's count, Dream's factor). Both are plain tuples (hashing runs in C). Knows nothing about the
model; reads Sequence properties only.
"""

from __future__ import annotations

from typing import NamedTuple

from diffvoice.engine.policies import POLICY_IDS
from diffvoice.engine.sequence import Sequence

INT_COLS = ("slot", "q_start", "q_end", "first", "visible", "writes", "d_start", "d_end",
            "prompt_len", "gen_end", "stop", "eos_fill", "final", "full_vocab", "first_token",
            "block_start")
INT = {name: i for i, name in enumerate(INT_COLS)}


class RowKey(NamedTuple):
    ints: tuple[int, ...]  # INT_COLS
    policy: str
    policy_id: int
    threshold: float
    entropy_bound: float


class RowPass(NamedTuple):
    steps_left: int
    k_fixed: int  # SDAR's schedule count (0 for other policies)
    dream_f: float  # Dream's 1 - s/t (1.0 for other policies)


def row_key(r: Sequence) -> RowKey:
    rules, params = r.rules, r.params
    q_start = r.q_start
    policy = params.policy or "low_confidence"
    ints = (r.slot, q_start, r.q_end, r.first_computed, r.visible_cache, int(r.writes),
            r.d_start, r.d_end, r.prompt_len, r.gen_end, int(not params.ignore_eos),
            int(rules.eos_fill), int(rules.final_commits), int(rules.full_vocab_confidence),
            int(r.first_token_due), r.block_start)
    tau = 0.9 if params.threshold is None else params.threshold
    return RowKey(ints, policy, POLICY_IDS[policy], tau, params.entropy_bound)


def row_pass(r: Sequence, key: RowKey) -> RowPass:
    sdar = key.policy in ("sdar_static", "sdar_dynamic")
    return RowPass(r.steps_left, r.k_fixed if sdar else 0,
                   r.dream_f if r.rules.dream_schedule else 1.0)
