"""The engine's cached, batched decoding against the plain full-recompute reference loop."""

import asyncio

import pytest

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.engine.vanilla import reference_decode

MESSAGES = [[{"role": "user", "content": "Hello, when do you open?"}],
            [{"role": "system", "content": "Be brief."},
             {"role": "user", "content": "How much is a haircut at the Main Street shop?"}],
            [{"role": "user", "content": "hi"}]]


async def collect(engine, messages, params):
    ids, text, last = [], "", None
    async for d in engine.generate(messages, params):
        ids += d.token_ids
        text += d.text
        last = d
    return ids, text, last


@pytest.fixture(scope="module", params=["sdar", "fast_dllm_v2", "dream", "llada",
                                        "sdar-static", "fast_dllm_v2-static"])
def engine(request, tmp_path_factory):
    """Each family; "-static" pads decode-only passes to batch/cache buckets exactly as the CUDA
    graph path does (without capture), to show padding changes no token."""
    family = request.param.removesuffix("-static")
    # larger init so random logits are peaked and ties (argmax order) are unlikely
    path = make_random_checkpoint(tmp_path_factory.mktemp(family), family=family,
                                  seed=1, init_std=0.3)
    eng = Engine.from_pretrained(path, EngineConfig(
        max_running=4, prefix_cache=False, static_shapes=request.param.endswith("-static"),
        batch_buckets=(2, 4)))
    yield eng
    eng.close()


@pytest.mark.parametrize("decoding", ["reference", "fast"])
@pytest.mark.parametrize("policy,kw", [("low_confidence", {"steps_per_block": 2}),
                                       ("threshold", {"threshold": 0.05}),
                                       ("entropy", {"entropy_bound": 2.0}),
                                       (None, {"steps_per_block": 3})])
async def test_batched_cached_decoding_matches_reference(engine, policy, kw, decoding):
    """Three concurrent requests (one batch, KV cache for block-causal models) give exactly the
    tokens of the full-recompute loop, under the family's own decoding (policy None = the
    family's default rule) and the engine's fast one."""
    params = SamplingParams(max_new_tokens=13, policy=policy, ignore_eos=True,
                            decoding=decoding, **kw)
    results = await asyncio.gather(*(collect(engine, m, params) for m in MESSAGES))
    for messages, (ids, _, last) in zip(MESSAGES, results, strict=True):
        prompt = engine.tokenizer.encode_chat(messages)
        ref, _ = reference_decode(engine.loaded.model, engine.model_config, prompt, params)
        assert ids == ref
        assert len(ids) == 13 and last.finish_reason == "length"
        assert last.prompt_tokens == len(prompt) and last.completion_tokens == 13
    if engine.config.static_shapes:  # the padded fixed-shape path really ran
        assert engine.runner.static.shapes


async def test_sub_blocks_and_eos_stop(engine):
    """A smaller decode block (a divisor of the trained block) also matches the reference, and
    without ignore_eos the answer ends at the first EOS the model commits."""
    mc = engine.model_config
    block = (mc.block_size // 2) if mc.block_causal else 5
    params = SamplingParams(max_new_tokens=11, steps_per_block=2, block_size=block)
    prompt = engine.tokenizer.encode_chat(MESSAGES[0])
    ids, _, last = await collect(engine, MESSAGES[0], params)
    ref, _ = reference_decode(engine.loaded.model, mc, prompt, params)
    assert ids == ref
    assert not set(ids) & set(mc.eos_token_ids)
    assert last.finish_reason == ("length" if len(ids) == 11 else "stop")


def test_reference_vanilla_commits_one_token_per_pass(engine):
    """The vanilla loop (one token per pass) takes exactly max_new_tokens passes (fast
    decoding: under the families' own, SDAR decodes the whole last block and v2 spends a pass
    on each block's first token)."""
    mc = engine.model_config
    block = mc.block_size if mc.block_causal else 8
    params = SamplingParams(max_new_tokens=8, steps_per_block=block, block_size=block,
                            ignore_eos=True, decoding="fast", policy="low_confidence")
    prompt = engine.tokenizer.encode_chat(MESSAGES[2])
    ids, passes = reference_decode(engine.loaded.model, mc, prompt, params)
    assert len(ids) == 8
    assert passes == 8  # a partial first block (block-causal alignment) needs fewer passes
