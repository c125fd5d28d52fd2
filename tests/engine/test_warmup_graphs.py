"""Engine.warmup() lays out (CPU, static_shapes) or captures (CUDA) the fixed-shape passes before
serving — decode-only passes and fast decoding's fused commit passes, which write K/V — so no
caller's pass pays a CUDA-graph capture (measured at ~1.5 s a shape on an H200, docs/perf.md):
every batch bucket up to max_running, every cache bucket up to EngineConfig.warmup_graph_context
tokens. Prepared shapes change no token; commit passes run on fixed shapes, not eagerly."""

import asyncio

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint

CHATS = [[{"role": "user", "content": f"caller {i}: when do you open on day {i}?"}]
         for i in range(6)]
PARAMS = SamplingParams(max_new_tokens=16, steps_per_block=2, ignore_eos=True)


def _answers(eng):
    async def one(m):
        return [t async for d in eng.generate(m, PARAMS) for t in d.token_ids]

    async def run():
        return await asyncio.gather(*(one(m) for m in CHATS))
    return asyncio.run(run())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_random_checkpoint(tmp_path_factory.mktemp("ckpt"), family="sdar",
                                  init_std=0.3, seed=5)


def test_warmup_prepares_every_bucket_and_serving_adds_none(checkpoint):
    eng = Engine.from_pretrained(checkpoint, EngineConfig(
        device="cpu", max_running=6, static_shapes=True, warmup_graph_context=64))
    try:
        eng.warmup()
        static = eng.runner.static
        block = eng.loaded.config.block_size  # sdar: no logit shift
        prepared = set(static.shapes)
        assert prepared == {(b, length, tc, start, writes) for b in (1, 2, 4, 8)
                            for tc in (16, 32, 64)
                            for length, start, writes in ((block, 0, False),
                                                          (2 * block, block, True))}
        got = _answers(eng)
        assert set(static.shapes) == prepared  # six concurrent short chats: no new shape
    finally:
        eng.close()
    lazy = Engine.from_pretrained(checkpoint, EngineConfig(
        device="cpu", max_running=6, static_shapes=True, warmup_graph_context=0))
    try:
        lazy.warmup()
        # nothing prepared: only the shapes the short warm-up request itself ran (cache <= 32)
        assert all(key[2] <= 32 for key in lazy.runner.static.shapes)
        assert _answers(lazy) == got  # prepared (zero-filled) shapes change no token
        # the fused commit passes (which store K/V) ran on fixed shapes too
        assert any(key[4] for key in lazy.runner.static.shapes)
    finally:
        lazy.close()


def test_warmup_graph_context_is_checked():
    with pytest.raises(ValueError, match="warmup_graph_context"):
        EngineConfig(warmup_graph_context=-1)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_warmup_captures_graphs_so_serving_captures_none(checkpoint):
    eng = Engine.from_pretrained(checkpoint, EngineConfig(device="cuda", dtype="float32",
                                                          max_running=6,
                                                          warmup_graph_context=64))
    try:
        eng.warmup()
        static = eng.runner.static
        assert static.shapes and all(st.graph is not None for st in static.shapes.values())
        prepared = set(static.shapes)
        _answers(eng)
        assert set(static.shapes) == prepared
    finally:
        eng.close()
