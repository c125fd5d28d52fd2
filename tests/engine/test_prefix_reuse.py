"""A later turn of the same conversation reuses the finished turn's cached blocks (block-causal
models: the cache is exact), and decodes exactly what a fresh full recompute gives."""

import asyncio

import pytest

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.engine.vanilla import reference_decode


async def answer(engine, messages, params):
    return [t async for d in engine.generate(messages, params) for t in d.token_ids]


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_second_turn_reuses_first_turns_blocks_exactly(tmp_path, family):
    path = make_random_checkpoint(tmp_path, family=family, seed=5, init_std=0.3)
    eng = Engine.from_pretrained(path, EngineConfig(max_running=2))
    params = SamplingParams(max_new_tokens=20, steps_per_block=2, ignore_eos=True)
    try:
        turn1 = [{"role": "user", "content": "Hello, when do you open on Monday morning?"}]
        reply = asyncio.run(answer(eng, turn1, params))
        assert eng.stats()["reused_prefix_tokens"] == 0
        turn2 = turn1 + [{"role": "assistant", "content": eng.tokenizer.decode(reply)},
                         {"role": "user", "content": "And on Saturday?"}]
        got = asyncio.run(answer(eng, turn2, params))
        reused = eng.stats()["reused_prefix_tokens"]
        block = eng.model_config.block_size
        first_prompt = len(eng.tokenizer.encode_chat(turn1))
        assert reused >= first_prompt // block * block > 0  # at least turn 1's whole blocks
        prompt2 = eng.tokenizer.encode_chat(turn2)
        expected, _ = reference_decode(eng.loaded.model, eng.model_config, prompt2, params)
        assert got == expected
        # an unrelated conversation shares no block and reuses nothing
        before = eng.stats()["reused_prefix_tokens"]
        asyncio.run(answer(eng, [{"role": "system", "content": "Different start."}], params))
        assert eng.stats()["reused_prefix_tokens"] == before
    finally:
        eng.close()
