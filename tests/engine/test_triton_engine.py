"""The whole engine with its Triton kernels forced decodes exactly what the PyTorch path decodes:
several requests in one batch, with cached prefixes and padded rows, as the engine itself builds
the kernels' arguments (views of its per-pass tables, not the tidy tensors of the kernel tests).
Without CUDA the kernels run under Triton's interpreter (slow: the shapes are tiny); on a GPU
they are compiled. This is the check that found the kernels reading the engine's strided
cache_lens with a unit stride (out-of-bounds reads on an H200)."""

import asyncio

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.kernels._triton import HAS_TRITON, can_interpret
from diffvoice.kernels.dispatch import ENV_VAR

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.skipif(not HAS_TRITON or (DEVICE == "cpu" and not can_interpret()),
                    reason="needs triton (compiled on CUDA, or its CPU interpreter)")
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
def test_triton_kernels_decode_as_the_torch_path(tmp_path, monkeypatch, family):
    path = make_random_checkpoint(tmp_path, family=family, init_std=0.3, seed=4)
    chats = [[{"role": "user", "content": f"caller {i}: when do you open{'?' * i}"}]
             for i in range(3)]
    params = SamplingParams(max_new_tokens=12, steps_per_block=2, ignore_eos=True)

    async def run(eng):
        async def one(m):
            return [t async for d in eng.generate(m, params) for t in d.token_ids]
        return await asyncio.gather(*(one(m) for m in chats))

    outs = {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv(ENV_VAR, backend)
        eng = Engine.from_pretrained(path, EngineConfig(device=DEVICE, dtype="float32",
                                                        enforce_eager=True, max_running=4))
        try:
            outs[backend] = asyncio.run(run(eng))
        finally:
            eng.close()
    assert all(len(ids) == 12 for ids in outs["torch"])
    assert outs["triton"] == outs["torch"]
