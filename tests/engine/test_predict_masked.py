"""Prediction over the slots a pass may commit (EngineConfig.predict_masked, issue 40 item 4):
the last layer's rows, the head and the softmax run only for each row's maskable window slots
(as many as the row with the most, bounded on the host by engine.block_step.masks_bound). The
answers are those of whole-window prediction token for token; every maskable slot is among
those predicted; rows the host cannot bound (sampled, reference decoding) predict the whole
window; and the model's forward for chosen slots equals those rows of its whole-window logits."""

from __future__ import annotations

import asyncio

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams, runner
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.runner import ModelRunner
from diffvoice.engine.testing import make_random_checkpoint, random_config

FAMILIES = ["sdar", "fast_dllm_v2", "llada", "dream"]
CHATS = [[{"role": "user", "content": text}] for text in
         ["hello there", "when do you open on saturday?", "a haircut, please", "thanks, bye",
          "can I book a cleaning", "where are you"]]
FAST = [
    SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=2),
    SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=4),
    SamplingParams(max_new_tokens=20, decoding="fast", policy="threshold", threshold=0.6),
    SamplingParams(max_new_tokens=20, decoding="fast", policy="entropy", entropy_bound=0.5),
    SamplingParams(max_new_tokens=24, decoding="fast", steps_per_block=3, ignore_eos=True),
]
WHOLE = [  # rows with no host bound: the whole window every pass
    SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=3, temperature=1.0,
                   seed=11),
    SamplingParams(max_new_tokens=20),  # the family's own decoding
]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {f: make_random_checkpoint(tmp_path_factory.mktemp(f), family=f, seed=4,
                                      init_std=0.5) for f in FAMILIES}


class SlotProbe:
    """Wraps ModelRunner._forward: counts passes that predicted fewer slots than the window,
    and checks that every maskable slot of such a pass is among those predicted."""

    def __init__(self, runner: ModelRunner):
        self.partial = self.whole = 0
        self.missed = 0  # maskable slots left out (must stay 0)
        forward = runner._forward

        def probed(ids, plan, select=None):
            logits, used = forward(ids, plan, select)
            if used is None:
                self.whole += 1
                return logits, used
            maskable = (ids[:, plan.L - plan.W:] == runner.mask_id) & plan.in_block
            self.missed += int(maskable.sum() - maskable.gather(1, used).sum())
            self.partial += used.shape[1] < plan.W
            assert logits.shape[:2] == used.shape
            return logits, used

        runner._forward = probed


def _decode(path, params, concurrent: bool, **config):
    engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                       max_running=8, **config))
    probe = SlotProbe(engine.runner)

    async def one(messages, p):
        return [t async for d in engine.generate(messages, p) for t in d.token_ids]

    async def run():
        plist = params if isinstance(params, list) else [params] * len(CHATS)
        if concurrent:
            return await asyncio.gather(*(one(m, p) for m, p in zip(CHATS, plist, strict=True)))
        return [await one(m, p) for m, p in zip(CHATS, plist, strict=True)]

    try:
        return asyncio.run(run()), probe
    finally:
        engine.close()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("concurrent", [False, True], ids=["batch1", "batch6"])
def test_masked_prediction_decodes_what_whole_window_prediction_decodes(checkpoints, family,
                                                                        concurrent, monkeypatch):
    # (a lone row too, which the engine itself leaves to whole-window prediction)
    monkeypatch.setattr(runner, "MASKED_MIN_BATCH", 1)
    partial = 0
    for params in FAST:
        whole, off = _decode(checkpoints[family], params, concurrent, predict_masked=False)
        got, probe = _decode(checkpoints[family], params, concurrent)
        assert got == whole, (family, params)
        assert off.partial == 0
        assert probe.missed == 0, (family, params)
        partial += probe.partial
    assert partial > 0, family  # later passes of a block predicted fewer slots


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_rows_without_a_bound_predict_the_whole_window(checkpoints, family, monkeypatch):
    _, lone = _decode(checkpoints[family], FAST[0], False)  # batch 1: runner.MASKED_MIN_BATCH
    assert lone.partial == 0 and lone.whole > 0
    monkeypatch.setattr(runner, "MASKED_MIN_BATCH", 1)
    for params in WHOLE:
        got, probe = _decode(checkpoints[family], params, False)
        assert probe.partial == 0 and probe.whole > 0, params
    # a batch mixing greedy fast rows with a sampled one: same answers as whole-window, and
    # the sampled row's seeded answer is the one it gets alone
    mixed = [FAST[0], WHOLE[0], FAST[2], FAST[0], WHOLE[0], FAST[3]]
    whole, _ = _decode(checkpoints[family], mixed, True, predict_masked=False)
    got, probe = _decode(checkpoints[family], mixed, True)
    assert got == whole and probe.missed == 0
    alone, _ = _decode(checkpoints[family], WHOLE[0], False)
    assert got[1] == alone[1] and got[4] == alone[4]


@pytest.mark.parametrize("family", FAMILIES)
def test_forward_for_chosen_slots_equals_those_rows_of_the_window(family):
    """Random weights and inputs: cached prefixes, a left-padded row, K/V writes; the selected
    rows' logits equal the whole window's (fp32), and the cache is written the same."""
    cfg = random_config(family, vocab_size=96, mask_token_id=95, eos_ids=(1,))
    torch.manual_seed(3)
    model = DiffusionLM(cfg)
    model.init_weights(std=0.3)
    model.eval().requires_grad_(False)
    b, n, t = 3, 8, 40
    pools = [(torch.randn(4, cfg.num_kv_heads, t + 1, cfg.head_dim),
              torch.randn(4, cfg.num_kv_heads, t + 1, cfg.head_dim))
             for _ in range(cfg.num_layers)]
    cache_lens = torch.tensor([5, 0, 13])
    positions = cache_lens[:, None] + torch.arange(n)[None]
    key_valid = torch.ones(b, n, dtype=torch.bool)
    key_valid[1, :2] = False
    positions[1, :2] = 0
    write_pos = torch.where(key_valid, positions, t)
    ids = torch.randint(0, 95, (b, n))
    slots = torch.tensor([2, 0, 3])
    for logits_start in (0, 4):
        for k in (1, 3, n - logits_start):
            select = torch.stack([torch.randperm(n - logits_start)[:k] for _ in range(b)])
            kv_full = [(a.clone(), c.clone()) for a, c in pools]
            kv_part = [(a.clone(), c.clone()) for a, c in pools]
            args = (ids, positions, key_valid)
            rest = (slots, cache_lens, int(cache_lens.max()), write_pos, logits_start)
            full = model.forward_step(*args, kv_full, *rest)
            part = model.forward_step(*args, kv_part, *rest, select=select)
            assert part.shape == (b, k, cfg.vocab_size)
            torch.testing.assert_close(part, full.take_along_dim(select[..., None], 1),
                                       rtol=1e-5, atol=1e-5)
            for (k1, v1), (k2, v2) in zip(kv_part, kv_full, strict=True):
                assert torch.equal(k1, k2) and torch.equal(v1, v2)
