"""The unmasking policies decided on the host, for one row on the CPU.

After a batch-1 CPU pass the slots a policy can commit are few (one decode block), so the runner
reads their predictions and confidences once (`.tolist()`) and decides the commits here in plain
Python instead of ~15 small tensor ops (engine.runner `_step_on_host`). The rules are those of the
tensor policies beside this file, value for value: confidences are float32 values (compared
with the threshold rounded to float32, as the tensor comparison does), Dream's k is
int(n * (1 - s/t)) in float32. One difference: exact ties in the score pick the earlier slot (as
the batched tensor path does); torch.topk leaves their order unspecified.
tests/engine/test_host_policies.py checks `commit_on_host` against the tensor policies on random
inputs.
"""

from __future__ import annotations

import math

from diffvoice.engine.policies.reference import _f32

HOST_POLICIES = frozenset({"low_confidence", "threshold", "threshold_ge", "dream_topk",
                           "dream_entropy", "sdar_static", "sdar_dynamic"})
SDAR = ("sdar_static", "sdar_dynamic")


def decidable_on_host(policy: str, n_masked: int, k_fixed: int) -> bool:
    """False where SDAR's top-k may reach past the masks (k > masks left): it then selects
    decoded slots of the block at -inf and re-predicts them, in torch.topk's own order, which
    only the tensor path reproduces."""
    return policy not in SDAR or k_fixed <= n_masked


def commit_on_host(policy: str, masked: list[int], conf: list[float],
                   entropy: list[float] | None, lo: int, *, threshold: float, steps_left: int,
                   dream_f: float, k_fixed: int = 0) -> list[int]:
    """-> the window slots to commit (ascending). masked: the window slots that may be
    committed (ascending); conf / entropy: values of window slots lo, lo + 1, ... (every slot of
    `masked` is covered); threshold, steps_left, dream_f, k_fixed: the row's knobs for this
    pass (SDAR's k_fixed at most len(masked): `decidable_on_host`)."""
    if not masked:
        return []
    if policy == "threshold" or policy == "threshold_ge":
        tau = _f32(threshold)
        if policy == "threshold":  # Fast-dLLM: p > tau
            chosen = [j for j in masked if conf[j - lo] > tau]
        else:  # Fast-dLLM v1's LLaDA loop: p >= tau
            chosen = [j for j in masked if conf[j - lo] >= tau]
        # at least one: the most confident slot (the first of equal maxima, as argmax)
        return chosen or [max(masked, key=lambda j: conf[j - lo])]
    if policy in SDAR:  # the schedule's top-k; dynamic: every slot with p > tau if enough
        if policy == "sdar_dynamic":
            tau = _f32(threshold)
            high = [j for j in masked if conf[j - lo] > tau]
            if len(high) >= k_fixed:
                return high
        k = k_fixed
        score = conf
    elif policy == "low_confidence":  # ceil(n / passes left), the most confident
        k = -(-len(masked) // max(1, steps_left))
        score = conf
    elif policy == "dream_topk":
        k = math.floor(_f32(len(masked) * dream_f))
        score = conf
    elif policy == "dream_entropy":  # Dream ranks by sum(p log p) = -entropy
        k = math.floor(_f32(len(masked) * dream_f))
        score = [-e for e in entropy]
    else:
        raise ValueError(f"no host rule for policy {policy!r}")
    if k <= 0:
        return []
    best = sorted(masked, key=lambda j: -score[j - lo])[:k]  # stable: earlier slot on ties
    return sorted(best)
