"""The replica sizing plan agrees with what a live engine actually allocates."""

from __future__ import annotations

import pytest
import torch

from diffvoice.engine import Engine, EngineConfig
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.voice.scale.sizing import (
    GiB,
    engine_tensor_bytes,
    planned_bytes,
    replicas_per_gpu,
    table,
)


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada"])
def test_plan_matches_a_live_engine(tmp_path, family):
    ckpt = make_random_checkpoint(tmp_path / family, family=family)
    engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", max_running=3,
                                                       max_seq_len=96))  # fmt: skip
    try:
        measured = engine_tensor_bytes(engine)
        planned = planned_bytes(engine.model_config, 3, 96, torch.float32)
    finally:
        engine.close()
    assert measured == planned
    assert measured["kv_pool"] > 0 and measured["weights"] > 0


def test_replicas_per_gpu():
    assert replicas_per_gpu(141 * GiB, 10 * GiB, 3 * GiB) == 10
    assert replicas_per_gpu(10 * GiB, 10 * GiB, 3 * GiB) == 0


def test_table_covers_the_open_families():
    rows = {r["model"]: r for r in table()}
    small, big = rows["Fast_dLLM_v2_1.5B (Qwen2.5-1.5B)"], rows["LLaDA-8B-Instruct"]
    # Qwen2.5-1.5B in bf16 is ~3 GiB of weights (1.54B params, tied)
    assert 2.7 < small["weights_gib"] < 3.2
    # LLaDA is MHA (32 KV heads): its KV pool dwarfs the 1.5B's 2 KV heads
    assert big["kv_pool_gib"] > 10 * small["kv_pool_gib"]
    assert small["replicas_per_h200"] > big["replicas_per_h200"] >= 1
