"""The engine's one-row CPU shortcuts against the plain formulas / general paths, on random inputs:
the greedy prediction with full-vocabulary entropy, Dream's host-side k, the host-side count
of the masks that still decide an answer (checked on whole requests against the device count),
the last layer run on the logit rows only (against the same forward asked for every row's
logits), and the one forward every pass runs (eager or on fixed shapes)."""

from __future__ import annotations

import pytest
import torch
from golden_loops import GOLDEN, golden_engine, load_golden

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.policies import PolicyKnobs
from diffvoice.engine.policies.reference import (
    commit_dream_entropy,
    commit_dream_topk,
    dream_factor,
)
from diffvoice.engine.sampling import predict
from diffvoice.engine.testing import decode_in_this_thread


@pytest.mark.parametrize("seed", range(4))
def test_greedy_cpu_entropy_matches_plain_formulas(seed):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(1, 11, 40, generator=g) * 4
    mask_id = 7
    full = torch.tensor([True])
    token, conf, entropy = predict(logits.clone(), mask_id, [0.0], [None], need_entropy=True,
                                   full_vocab=full, full_vocab_all=True)
    p = torch.softmax(logits.double(), -1)
    want_entropy = -(p * p.log()).sum(-1)
    p_no_mask = p.clone()
    p_no_mask[..., mask_id] = 0.0
    want_conf, want_token = p_no_mask.max(-1)
    assert torch.equal(token, want_token)
    assert torch.allclose(conf.double(), want_conf, atol=1e-6)
    assert torch.allclose(entropy.double(), want_entropy, atol=1e-5)


def _dream_ref(score, maskable, f):
    """Dream's `_sample` selection for one row: int(n * f) in float32, top-k by score."""
    idx = [i for i in range(len(score)) if maskable[i]]
    k = int(torch.tensor(float(len(idx)), dtype=torch.float32) * torch.tensor(f))
    chosen = sorted(idx, key=lambda i: -score[i])[:k]
    return [i in chosen for i in range(len(score))]


@pytest.mark.parametrize("steps", [1, 5, 8, 24])
def test_dream_k_matches_upstream_rule(steps):
    g = torch.Generator().manual_seed(steps)
    for step in range(steps):
        f = dream_factor(step, steps)
        conf = torch.rand(1, 30, generator=g)
        entropy = torch.rand(1, 30, generator=g) * 3
        maskable = torch.rand(1, 30, generator=g) < 0.7
        knobs = PolicyKnobs(steps_left=None, threshold=None, entropy_bound=None,
                            dream_f=torch.tensor([f], dtype=torch.float32))
        got = commit_dream_topk(conf, None, maskable, knobs)
        assert got[0].tolist() == _dream_ref(conf[0].tolist(), maskable[0].tolist(), f)
        got = commit_dream_entropy(conf, entropy, maskable, knobs)
        assert got[0].tolist() == _dream_ref((-entropy[0]).tolist(), maskable[0].tolist(), f)


@pytest.mark.parametrize("rows", [1, 2], ids=["batch1", "batch2"])
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada", "dream"])
def test_last_layer_on_logit_rows_only_matches_the_full_forward(family, rows, monkeypatch):
    """Past the keys and values, the last layer is row-wise: it runs its queries, output
    projection and MLP on the rows that give logits only (the rows past logits_start). On every
    such pass of real requests the logits equal those of the same forward asked for every
    row, sliced, and the answers stay the goldens."""
    with golden_engine(family) as (golden, engine):
        model = engine.runner.model
        forward = type(model).forward_step
        trimmed = []

        def both(self, *args, **kwargs):
            got = forward(self, *args, **kwargs)
            start = args[8]
            if start:  # writing the same K/V twice is harmless
                full = forward(self, *args[:8], 0, **kwargs)[:, start:]
                assert got.shape == full.shape
                assert (got - full).abs().max() <= 1e-4 * full.abs().max()
                trimmed.append((args[0].shape[0], args[0].shape[1] - start))
            return got

        monkeypatch.setattr(type(model), "forward_step", both)
        cases = golden["cases"][::3]
        for i in range(0, len(cases), rows):
            group = cases[i:i + rows]
            seqs = [engine.prepare(golden["prompts"][c["prompt"]],
                                   SamplingParams(**c["engine_params"])) for c in group]
            decode_in_this_thread(engine, *seqs)
            assert [seq.generated for seq in seqs] == [c["answer"] for c in group]
        assert any(b == rows for b, _ in trimmed)  # the path under test was taken


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_every_pass_runs_the_one_forward_eager_or_fixed_shape(family, monkeypatch):
    """One runner path (issue 40, item 5): each pass calls DiffusionLM.forward_step exactly once,
    with the runner's plan when eager and with none (its geometry built for the pass) on the
    padded fixed shapes of static_shapes, and both give the goldens."""
    _, golden = load_golden(family)
    cases = golden["cases"][::4]
    calls: list[bool] = []
    passes: list[int] = []
    forward = DiffusionLM.forward_step

    def counted(self, *args, plan=None, **kw):
        calls.append(plan is not None)
        return forward(self, *args, plan=plan, **kw)

    monkeypatch.setattr(DiffusionLM, "forward_step", counted)
    for static in (False, True):
        engine = Engine.from_pretrained(GOLDEN / family / "fixture", EngineConfig(
            max_running=4, dtype="float32", static_shapes=static, batch_buckets=(1, 2, 4)))
        try:
            calls.clear()
            passes.clear()
            engine.runner.step = lambda *a, step=engine.runner.step, **k: (
                passes.append(1) or step(*a, **k))
            seqs = [engine.prepare(golden["prompts"][c["prompt"]],
                                   SamplingParams(**c["engine_params"])) for c in cases[:4]]
            decode_in_this_thread(engine, *seqs)
            assert [s.generated for s in seqs] == [c["answer"] for c in cases[:4]]
            assert len(calls) == len(passes) > 0
            assert not static or (engine.runner.static.shapes and not all(calls))
            assert static or all(calls)
        finally:
            engine.close()
