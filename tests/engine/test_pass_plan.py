"""Pass plans keyed by shape (engine.pass_plan): a one-row plan built for one block is
re-anchored for the next instead of being built again, and a re-anchored plan holds exactly the
tensors a fresh build at those positions would (checked field by field on the keys of real
decodes: every family; a batch's plans, assembled from its rows' parts, too). In steady state no
plan is built, for one row or a batch: requests whose prompts are a whole number of blocks longer
than earlier ones build only their prefill's
(block-causal families, which cache: LLaDA's and Dream's passes here recompute the whole prefix,
so a longer prefix is a larger tensor, another shape).
"""

from __future__ import annotations

import dataclasses
import random

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.pass_plan import AttnPlan, PlanCache
from diffvoice.engine.rowbatch import row_key
from diffvoice.engine.testing import decode_in_this_thread, make_random_checkpoint

FAMILIES = ["sdar", "fast_dllm_v2", "llada", "dream"]
# LLaDA's and Dream's decode blocks are the request's (block-causal families': the model's)
BLOCK = {"llada": 8, "dream": 8}
WORDS = "hello there when do you open on saturday book me a cleaning please thanks".split()


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    out = {}
    for family in FAMILIES:
        path = make_random_checkpoint(tmp_path_factory.mktemp(family), family=family, seed=3,
                                      init_std=0.5)
        out[family] = Engine.from_pretrained(path, EngineConfig(device="cpu", max_running=4))
    yield out
    for engine in out.values():
        engine.close()


def _prompts_by_length(engine: Engine, params: SamplingParams) -> dict[int, str]:
    rng, by_len = random.Random(0), {}
    for _ in range(300):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 14)))
        seq = engine.prepare([{"role": "user", "content": text}], params)
        by_len.setdefault(seq.prompt_len, text)
    return by_len


def _decode(engine: Engine, texts: list[str], params: SamplingParams, keys: list | None = None):
    step = engine.runner.step

    def recorded(rows, *args, **kwargs):
        keys.append(tuple(row_key(r) for r in rows))
        return step(rows, *args, **kwargs)

    if keys is not None:
        engine.runner.step = recorded
    try:
        seqs = [engine.prepare([{"role": "user", "content": t}], params) for t in texts]
        decode_in_this_thread(engine, *seqs)
    finally:
        engine.runner.__dict__.pop("step", None)
    return [s.generated for s in seqs]


def _same(a, b, where: str) -> None:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        assert isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor), where
        assert a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, AttnPlan):
        for f in dataclasses.fields(AttnPlan):
            if f.name == "views":
                assert (a.views is None) == (b.views is None), where
                for va, vb in zip(a.views or (), b.views or (), strict=True):
                    for x, y in zip(va, vb, strict=True):  # the same pool memory, viewed alike
                        assert (x.data_ptr(), x.shape, x.stride()) == \
                            (y.data_ptr(), y.shape, y.stride()), where
            else:
                _same(getattr(a, f.name), getattr(b, f.name), f"{where}.{f.name}")
    else:
        assert a == b, where


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("batch", [1, 3])
def test_a_rebound_plan_holds_what_a_fresh_build_holds(engines, family, batch):
    engine = engines[family]
    params = SamplingParams(max_new_tokens=24, decoding="fast", steps_per_block=2,
                            block_size=BLOCK.get(family))
    by_len = _prompts_by_length(engine, params)
    lengths = sorted(by_len)
    keys: list = []
    for start in (0, 3, 7):  # three cohorts of prompts of different lengths and alignments
        texts = [by_len[lengths[(start + 2 * i) % len(lengths)]] for i in range(batch)]
        _decode(engine, texts, params, keys)
    runner = engine.runner

    def cache():
        return PlanCache(runner.model, runner.kv, runner.device, runner.T, runner.mask_id,
                         runner.shift)

    kept = cache()
    for k in keys:
        plan = kept.get(k)
        fresh = cache().get(k)
        for f in dataclasses.fields(plan):
            if f.name not in ("anchors", "binding"):
                _same(getattr(plan, f.name), getattr(fresh, f.name), f"{family}.{f.name}")
    assert kept.bound >= 3, (kept.built, kept.bound, len(keys))  # binds were compared


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])  # LLaDA and Dream here recompute
@pytest.mark.parametrize("batch", [1, 3])
def test_requests_whole_blocks_longer_build_only_their_prefill_plan(engines, family, batch):
    engine = engines[family]
    params = SamplingParams(max_new_tokens=32, decoding="fast", steps_per_block=2,
                            ignore_eos=True, block_size=BLOCK.get(family))
    by_len = _prompts_by_length(engine, params)
    bases = [n for n in sorted(by_len) if n + 8 in by_len][:batch]
    assert len(bases) == batch
    _decode(engine, [by_len[n] for n in bases], params)  # its plans: every shape of this decode
    plans = engine.runner.plans
    built, bound = plans.built, plans.bound
    # 8 tokens later (a whole number of blocks of 4 and 8 tokens): every position differs,
    # every shape but the prefill's is the same
    out = _decode(engine, [by_len[n + 8] for n in bases], params)
    assert [len(o) for o in out] == [32] * batch
    assert plans.built - built == 1
    assert plans.bound - bound >= 4  # a bind at least per block: all of them new positions
