"""On a GPU: CUDA-graph replay and eager decoding give the same tokens (skipped without CUDA)."""

import asyncio

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint

pytestmark = pytest.mark.gpu


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_graphs_and_eager_give_the_same_tokens(tmp_path, family):
    path = make_random_checkpoint(tmp_path, family=family, init_std=0.3, seed=4)
    chats = [[{"role": "user", "content": f"caller {i}: when do you open?"}] for i in range(5)]
    params = SamplingParams(max_new_tokens=24, steps_per_block=2, ignore_eos=True)

    async def run(eng):
        async def one(m):
            return [t async for d in eng.generate(m, params) for t in d.token_ids]
        return await asyncio.gather(*(one(m) for m in chats))

    outs = {}
    for eager in (True, False):
        eng = Engine.from_pretrained(path, EngineConfig(device="cuda", dtype="float32",
                                                        enforce_eager=eager, max_running=8))
        try:
            outs[eager] = asyncio.run(run(eng))
            if not eager:
                assert any(st.graph is not None for st in eng.runner.static.shapes.values())
        finally:
            eng.close()
    assert outs[True] == outs[False]
