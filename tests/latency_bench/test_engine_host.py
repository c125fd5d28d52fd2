"""latency_bench.engine_host's operator counts: the GPU's decode path (Triton kernels, here under
the CPU interpreter) against the PyTorch path, and what a kernel launch counts as."""

import pytest
import torch

from diffvoice.engine import SamplingParams
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.profiling import AtenOps
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.kernels._triton import HAS_TRITON, can_interpret
from diffvoice.kernels.ops import rmsnorm
from diffvoice.latency_bench.engine_host import aten_ops_per_layer_pass

needs_triton = pytest.mark.skipif(not HAS_TRITON or not can_interpret(),
                                  reason="needs triton and its CPU interpreter")


@needs_triton
def test_a_triton_launch_is_one_operator():
    x, w, res = torch.randn(2, 3, 32), torch.ones(32), torch.randn(2, 3, 32)
    with AtenOps() as ops:
        rmsnorm(x, w, res, backend="triton")
    assert ops.by_name["triton._rmsnorm_kernel"] == 1
    # the interpreter's own copies are not counted; what the wrapper allocates and views is,
    # as metadata
    assert ops.launches == 1 and ops.count == ops.metadata + 1
    with AtenOps() as ops:
        rmsnorm(x, w, res, backend="torch")
    assert not any(name.startswith("triton.") for name in ops.by_name)
    assert ops.launches > 1


@needs_triton
def test_the_fused_decode_path_launches_fewer_operators_per_layer(tmp_path):
    dims = dict(family="fast_dllm_v2", vocab_size=400, hidden_size=64, num_layers=2,
                num_heads=4, num_kv_heads=2, head_dim=16, intermediate_size=96, block_size=8,
                tie_word_embeddings=True, rope_theta=10000.0)
    loaded = load_checkpoint(make_random_checkpoint(tmp_path, family="fast_dllm_v2"))
    mask, eos = loaded.config.mask_token_id, loaded.config.eos_token_ids[0]
    params = SamplingParams(max_new_tokens=8, steps_per_block=2, ignore_eos=True)
    counts = {k: aten_ops_per_layer_pass(dims, loaded.tokenizer, mask, eos, params, kernels=k)
              for k in ("torch", "triton")}
    torch_ops, triton_ops = (counts[k]["device_ops_per_layer_pass"] for k in ("torch", "triton"))
    assert 0 < triton_ops < torch_ops
    assert counts["torch"]["device_ops_per_layer_pass"] <= \
        counts["torch"]["aten_ops_per_layer_pass"]
