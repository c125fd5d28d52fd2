"""The engine's one-row CPU shortcuts against the plain formulas / general paths, on random inputs:
the greedy prediction with full-vocabulary entropy, Dream's host-side k, the host-side count
of the masks that still decide an answer (checked on whole requests against the device count),
the signed-residual batch-1 forward (against the general planned forward and float64), and the
last layer run on the logit rows only (against the same forward asked for every row's logits)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from golden_loops import GOLDEN, golden_engine, load_golden

from diffvoice.engine import Engine, EngineConfig, SamplingParams
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


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada", "dream"])
def test_signed_residual_forward_matches_planned_forward(family, monkeypatch):
    """The batch-1 CPU forward that carries the residual as [x, -x] (LayerNorm for RMSNorm,
    2-D addmm) gives the logits of the general planned forward on every pass of real requests
    (cached / uncached, with and without q/k norm and qkv bias), and the engine's answers do not
    change when it is switched off."""
    with golden_engine(family) as (golden, engine):
        model = engine.runner.model
        signed = model.signed_layers
        assert signed is not None  # small fp32 model on the CPU
        planned = type(model)._forward_planned
        model64 = copy.deepcopy(model).double()
        model64.fuse_projections()
        assert model64.signed_layers is None  # fp32 only
        compared, errors = [], []

        def both(self, *args):
            plan = args[-1]
            self.signed_layers = None
            want = planned(self, *args)
            self.signed_layers = signed
            got = planned(self, *args)  # takes the signed path where it applies
            if args[0].shape[0] == 1 and (plan.views is not None or plan.direct):
                compared.append(args[0].shape[1])
                scale = want.abs().max()
                # the sharpened fixtures amplify fp32 rounding to ~1e-5 of the largest logit
                assert (got - want).abs().max() <= 1e-4 * scale
                if plan.direct:  # no cache: both against the same pass in float64
                    p64 = dataclasses.replace(plan, cos=plan.cos.double(), sin=plan.sin.double(),
                                              mask=None if plan.mask is None
                                              else plan.mask.double())
                    ref = planned(model64, *args[:-1], p64)
                    errors.append(((want - ref).abs().max() / ref.abs().max(),
                                   (got - ref).abs().max() / ref.abs().max()))
            return got

        monkeypatch.setattr(type(model), "_forward_planned", both)
        # the logit-row forward (test_last_layer_on_logit_rows_only...) off: every pass here
        monkeypatch.setattr(type(model), "forward_rows", lambda self, *args: None)
        cases = golden["cases"][::4]
        for c in cases:
            seq = engine.prepare(golden["prompts"][c["prompt"]],
                                 SamplingParams(**c["engine_params"]))
            decode_in_this_thread(engine, seq)
            assert seq.generated == c["answer"]
        assert len(compared) >= 10 * len(cases) // 2
        if family in ("llada", "dream"):  # their passes read no cache
            assert len(errors) >= 10
            worst_general = max(float(e) for e, _ in errors)
            worst_signed = max(float(e) for _, e in errors)
            assert worst_signed <= 1.5 * worst_general + 1e-6
        monkeypatch.setattr(type(model), "_forward_planned", planned)
        model.signed_layers = None  # the general path alone: the same answers
        for c in cases:
            seq = engine.prepare(golden["prompts"][c["prompt"]],
                                 SamplingParams(**c["engine_params"]))
            decode_in_this_thread(engine, seq)
            assert seq.generated == c["answer"]


@pytest.mark.parametrize("rows", [1, 2], ids=["batch1-signed", "batch2-planned"])
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada", "dream"])
def test_last_layer_on_logit_rows_only_matches_the_full_forward(family, rows, monkeypatch):
    """Past the keys and values, the last layer is row-wise: it runs its queries, output
    projection and MLP on the rows that give logits only (the rows past logits_start; for one
    row, only the window slots its policy can read: runner._some_logits). On every such pass of
    real requests (one row: the signed forward; two rows: the general planned forward) the
    logits equal those of the same forward asked for every row, sliced, and the answers stay
    the goldens."""
    with golden_engine(family) as (golden, engine):
        model = engine.runner.model
        planned = type(model)._forward_planned
        trimmed = []

        def both(self, *args):
            got = planned(self, *args)
            start = args[6]
            if start:  # writing the same K/V twice is harmless
                full = planned(self, *args[:6], 0, args[7])[:, start:]
                assert got.shape == full.shape
                assert (got - full).abs().max() <= 1e-4 * full.abs().max()
                trimmed.append((args[0].shape[0], args[0].shape[1] - start))
            return got

        rows_only = type(model).forward_rows

        def window(self, input_ids, kv_cache, start, end, plan):
            got = rows_only(self, input_ids, kv_cache, start, end, plan)
            if got is not None:  # against the same forward asked for every row
                full = self._forward_signed(input_ids, 0, plan)[:, start:end]
                assert got.shape == full.shape
                assert (got - full).abs().max() <= 1e-4 * full.abs().max()
                trimmed.append((1, end - start))
            return got

        monkeypatch.setattr(type(model), "_forward_planned", both)
        monkeypatch.setattr(type(model), "forward_rows", window)
        cases = golden["cases"][::3]
        for i in range(0, len(cases), rows):
            group = cases[i:i + rows]
            seqs = [engine.prepare(golden["prompts"][c["prompt"]],
                                   SamplingParams(**c["engine_params"])) for c in group]
            decode_in_this_thread(engine, *seqs)
            assert [seq.generated for seq in seqs] == [c["answer"] for c in group]
        assert any(b == rows for b, _ in trimmed)  # the path under test was taken


def test_signed_residual_weights_only_for_small_cpu_fp32_models():
    _, golden = load_golden("sdar")
    engine = Engine.from_pretrained(GOLDEN / "sdar" / "fixture",
                                    EngineConfig(max_running=1, dtype="float32"))
    try:
        model = engine.runner.model
        assert model.signed_layers is not None
        model.SIGNED_MAX_HIDDEN = model.config.hidden_size - 1
        assert model._signed_residual_weights() is None
    finally:
        engine.close()
