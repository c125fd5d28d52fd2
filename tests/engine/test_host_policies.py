"""The one-row CPU pass that decides its commits on the host (engine.policies.host, runner
`_step_on_host`) against the tensor policies: on random inputs, policy by policy, and on whole
requests (golden cases and other policies), token for token, pass for pass, with the same
first-block confidence (Dream's passes after one that committed nothing reuse its predictions).
Pass by pass (block_step_passes=1): a block step's passes take the tensor path."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from golden_loops import golden_engine

from diffvoice.engine import SamplingParams
from diffvoice.engine.decoding import sdar_schedule
from diffvoice.engine.policies import POLICIES, PolicyKnobs
from diffvoice.engine.policies.host import (
    HOST_POLICIES,
    commit_on_host,
    decidable_on_host,
)
from diffvoice.engine.policies.reference import dream_factor
from diffvoice.engine.testing import decode_in_this_thread


def _random_row(g: torch.Generator, policy: str):
    """One row's window: W slots, the decode block [d0, d1) (SDAR: its aligned block from b0),
    masks in it, float32 confidences (one exactly at the threshold) and entropies, knobs."""
    W = int(torch.randint(4, 33, (1,), generator=g))
    d0 = int(torch.randint(0, W, (1,), generator=g))
    d1 = int(torch.randint(d0 + 1, W + 1, (1,), generator=g))
    b0 = int(torch.randint(0, d0 + 1, (1,), generator=g))
    cur_mask = torch.rand(W, generator=g) < 0.6
    maskable = torch.zeros(W, dtype=torch.bool)
    maskable[d0:d1] = cur_mask[d0:d1]
    conf = torch.rand(W, generator=g)
    tau = float(torch.rand((), generator=g) * 0.6 + 0.3)
    # one slot exactly at the threshold (> vs >= matters); no two equal scores otherwise
    conf[int(torch.randint(0, W, (1,), generator=g))] = torch.tensor(tau, dtype=torch.float32)
    entropy = torch.rand(W, generator=g) * 3
    steps = int(torch.randint(1, 9, (1,), generator=g))
    step = int(torch.randint(0, steps, (1,), generator=g))
    n = int(maskable.sum())
    k_fixed = sdar_schedule(d1 - b0, steps)[step] if policy.startswith("sdar") else 0
    return dict(W=W, d0=d0, d1=d1, b0=b0, maskable=maskable, conf=conf, entropy=entropy,
                tau=tau, steps_left=steps - step, dream_f=dream_factor(step, steps),
                k_fixed=k_fixed, n=n)


def _knobs(rows: list[dict], W: int) -> PolicyKnobs:
    block = torch.zeros(len(rows), W, dtype=torch.bool)
    for i, r in enumerate(rows):
        block[i, r["b0"]:r["d1"]] = True
    return PolicyKnobs(
        steps_left=torch.tensor([r["steps_left"] for r in rows]),
        threshold=torch.tensor([r["tau"] for r in rows], dtype=torch.float32),
        entropy_bound=torch.ones(len(rows)),
        k_fixed=torch.tensor([r["k_fixed"] for r in rows]), k_host=[r["k_fixed"] for r in rows],
        block=block, dream_f=torch.tensor([r["dream_f"] for r in rows], dtype=torch.float32),
        dream_f_host=[r["dream_f"] for r in rows])


def _pad(t: torch.Tensor, W: int, value) -> torch.Tensor:
    return torch.cat((t, torch.full((W - t.shape[0],), value, dtype=t.dtype)))


@pytest.mark.parametrize("policy", sorted(HOST_POLICIES))
def test_host_rules_match_the_tensor_policies_on_random_rows(policy):
    g = torch.Generator().manual_seed(sum(map(ord, policy)))
    checked = 0
    for _ in range(300):
        r = _random_row(g, policy)
        if not decidable_on_host(policy, r["n"], r["k_fixed"]):
            continue  # SDAR's top-k past the masks: the tensor path decides (tested below)
        masked = [j for j in range(r["W"]) if r["maskable"][j]]
        lo = r["b0"] if policy.startswith("sdar") else r["d0"]  # the logit rows read
        got = commit_on_host(policy, masked, r["conf"][lo:].tolist(),
                             r["entropy"][lo:].tolist(), lo, threshold=r["tau"],
                             steps_left=r["steps_left"], dream_f=r["dream_f"],
                             k_fixed=r["k_fixed"])
        # the tensor policy: one row (its CPU shortcut) and inside a batch of two rows
        other = _random_row(g, policy)
        W = max(r["W"], other["W"])
        conf = torch.stack([_pad(x["conf"], W, 0.0) for x in (r, other)])
        entropy = torch.stack([_pad(x["entropy"], W, 1.0) for x in (r, other)])
        maskable = torch.stack([_pad(x["maskable"], W, False) for x in (r, other)])
        if policy.startswith("sdar") and other["k_fixed"] > other["n"]:
            other["k_fixed"] = other["n"]
        one = POLICIES[policy](conf[:1], entropy[:1], maskable[:1], _knobs([r], W))
        two = POLICIES[policy](conf, entropy, maskable, _knobs([r, other], W))
        want = [j for j in range(W) if one[0, j]]
        assert got == want, (policy, r)
        assert [j for j in range(W) if two[0, j]] == want
        checked += 1
    assert checked > 150


def test_sdar_top_k_past_the_masks_is_left_to_the_tensor_path():
    assert decidable_on_host("sdar_static", 3, 3) and not decidable_on_host("sdar_static", 2, 3)
    assert not decidable_on_host("sdar_dynamic", 0, 1)
    assert decidable_on_host("dream_topk", 0, 5)  # only SDAR's top-k reaches decoded slots


def _requests(family: str, golden: dict) -> list[tuple]:
    """Every golden case at its reference setting, plus other policies and thresholds."""
    jobs = [(golden["prompts"][c["prompt"]], SamplingParams(**c["engine_params"]))
            for c in golden["cases"]]
    msgs = golden["prompts"][0]
    extra = {"sdar": [dict(policy="low_confidence", steps_per_block=2),
                      dict(policy="threshold", threshold=0.3, steps_per_block=4)],
             "fast_dllm_v2": [dict(threshold=0.5), dict(threshold=0.99)],
             "llada": [dict(policy="threshold", threshold=0.7, steps_per_block=8),
                       dict(policy="low_confidence", steps_per_block=3, block_size=8)],
             "dream": [dict(policy="entropy", steps_per_block=6),
                       dict(policy="low_confidence", steps_per_block=24)]}[family]
    return jobs + [(msgs, SamplingParams(max_new_tokens=24, **kw)) for kw in extra]


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada", "dream"])
def test_host_pass_decodes_as_the_tensor_pass(family, monkeypatch):
    with golden_engine(family, block_step_passes=1) as (golden, engine):
        plans = engine.runner.plans
        build_one = plans._build_one
        taken = []
        step_on_host = engine.runner._step_on_host

        def counting(*args):
            out = step_on_host(*args)
            taken.append(out is not None)
            return out

        monkeypatch.setattr(engine.runner, "_step_on_host", counting)
        forwards = []
        predictions = engine.runner._host_predictions

        def forward(*args):
            forwards.append(1)
            return predictions(*args)

        monkeypatch.setattr(engine.runner, "_host_predictions", forward)

        def run(host: bool):
            plans.plans.clear()

            def build(key):
                plan = build_one(key)
                return plan if host else dataclasses.replace(plan, host_block=None)

            monkeypatch.setattr(plans, "_build_one", build)
            out = []
            for messages, params in _requests(family, golden):
                seq = engine.prepare(messages, params)
                decode_in_this_thread(engine, seq)
                out.append((seq.generated, seq.passes, seq.finish_reason, seq.first_block_conf))
            return out

        tensor = run(False)
        assert not taken
        host = run(True)
        assert host == tensor
        assert sum(taken) > 0.8 * len(taken)  # most passes were decided on the host
        if family == "dream":  # a pass after one that committed nothing reuses its predictions
            assert 0 < len(forwards) < sum(taken)
        else:
            assert len(forwards) == sum(taken)
        n = len(golden["cases"])
        assert [g for g, *_ in host[:n]] == [c["answer"] for c in golden["cases"]]
