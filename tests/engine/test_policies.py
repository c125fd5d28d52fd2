"""The vectorised unmasking policies against per-row Python references on random inputs."""

import math

import pytest
import torch

from diffvoice.engine.policies import POLICY_IDS, PolicyKnobs, commit_mixed
from diffvoice.engine.policies.entropy_bounded import commit_entropy_bounded
from diffvoice.engine.policies.low_confidence import commit_low_confidence
from diffvoice.engine.policies.threshold import commit_threshold


def random_batch(seed, b=7, w=13):
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(b, w, generator=g)
    entropy = torch.rand(b, w, generator=g) * 3
    maskable = torch.rand(b, w, generator=g) < 0.6
    maskable[0] = False  # a row with nothing left to commit
    knobs = PolicyKnobs(steps_left=torch.randint(1, 5, (b,), generator=g),
                        threshold=torch.rand(b, generator=g),
                        entropy_bound=torch.rand(b, generator=g) * 2)
    return conf, entropy, maskable, knobs


def ref_low_confidence(conf, maskable, steps_left):
    idx = [i for i in range(len(conf)) if maskable[i]]
    k = math.ceil(len(idx) / steps_left)
    chosen = sorted(idx, key=lambda i: (-conf[i], i))[:k]
    return [i in chosen for i in range(len(conf))]


def ref_threshold(conf, maskable, tau):
    out = [bool(maskable[i] and conf[i] > tau) for i in range(len(conf))]
    if any(maskable) and not any(out):
        best = max((i for i in range(len(conf)) if maskable[i]), key=lambda i: conf[i])
        out[best] = True
    return out


def ref_entropy(entropy, maskable, gamma):
    idx = sorted((i for i in range(len(entropy)) if maskable[i]), key=lambda i: (entropy[i], i))
    chosen, total = [], 0.0
    for i in idx:
        if total <= gamma:  # the set below this candidate stays within the bound
            chosen.append(i)
            total += entropy[i]
        else:
            break
    return [i in chosen for i in range(len(entropy))]


@pytest.mark.parametrize("seed", range(5))
def test_policies_match_references(seed):
    conf, entropy, maskable, knobs = random_batch(seed)
    low = commit_low_confidence(conf, entropy, maskable, knobs)
    thr = commit_threshold(conf, entropy, maskable, knobs)
    ent = commit_entropy_bounded(conf, entropy, maskable, knobs)
    for b in range(conf.shape[0]):
        c, e, m = conf[b].tolist(), entropy[b].tolist(), maskable[b].tolist()
        assert low[b].tolist() == ref_low_confidence(c, m, int(knobs.steps_left[b]))
        assert thr[b].tolist() == ref_threshold(c, m, float(knobs.threshold[b]))
        assert ent[b].tolist() == ref_entropy(e, m, float(knobs.entropy_bound[b]))
        for out in (low, thr, ent):
            assert not (out[b] & ~maskable[b]).any()  # never touches committed slots
            assert out[b].any() == maskable[b].any()  # progress whenever something is masked


def test_low_confidence_schedule_equals_llada_split():
    """Over a block, ceil(n / steps_left) per pass reproduces LLaDA's transfer counts."""
    for n in range(1, 20):
        for steps in range(1, 9):
            left, counts = n, []
            for s in range(steps):
                k = -(-left // (steps - s))
                counts.append(k)
                left -= k
            base, rem = divmod(n, steps)
            assert counts == [base + (1 if i < rem else 0) for i in range(steps)]


def test_mixed_batch_applies_each_rows_policy():
    conf, entropy, maskable, knobs = random_batch(11)
    ids = torch.tensor([POLICY_IDS[n] for n in ["threshold", "entropy", "low_confidence"] * 3][:7])
    mixed = commit_mixed(["entropy", "low_confidence", "threshold"], ids, conf, entropy,
                         maskable, knobs)
    singles = {n: f(conf, entropy, maskable, knobs) for n, f in
               [("low_confidence", commit_low_confidence), ("threshold", commit_threshold),
                ("entropy", commit_entropy_bounded)]}
    names = {v: k for k, v in POLICY_IDS.items()}
    for b in range(7):
        assert torch.equal(mixed[b], singles[names[int(ids[b])]][b])
