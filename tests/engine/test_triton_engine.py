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


@pytest.mark.skipif(not HAS_TRITON or (DEVICE == "cpu" and not can_interpret()),
                    reason="needs triton (compiled on CUDA, or its CPU interpreter)")
@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "llada"])
@pytest.mark.parametrize("logits_start", [0, 3])
def test_fused_forward_matches_the_torch_forward(monkeypatch, family, logits_start):
    """forward_step on the Triton backend (fused RMSNorm with its residual add, rotary read from
    the position tables, block attention) against the PyTorch backend on random inputs: a
    batch with cached prefixes of different lengths, a left-padded row and K/V writes. Same
    logits (fp32) and the same cache afterwards; the fused kernels are what ran."""
    from diffvoice.engine.model import DiffusionLM
    from diffvoice.engine.testing import random_config
    from diffvoice.kernels import rmsnorm as rmsnorm_mod
    from diffvoice.kernels import rotary as rotary_mod

    cfg = random_config(family, vocab_size=96, mask_token_id=95, eos_ids=(1,))
    torch.manual_seed(7)
    model = DiffusionLM(cfg).to(DEVICE)
    model.init_weights(std=0.3)
    model.eval().requires_grad_(False)
    b, n, slots_total, t = 3, 8, 4, 40
    pools = [(torch.randn(slots_total, cfg.num_kv_heads, t + 1, cfg.head_dim, device=DEVICE),
              torch.randn(slots_total, cfg.num_kv_heads, t + 1, cfg.head_dim, device=DEVICE))
             for _ in range(cfg.num_layers)]
    cache_lens = torch.tensor([5, 0, 13], device=DEVICE)
    positions = cache_lens[:, None] + torch.arange(n, device=DEVICE)[None]
    key_valid = torch.ones(b, n, dtype=torch.bool, device=DEVICE)
    key_valid[1, :2] = False  # row 1 is left-padded
    positions[1, :2] = 0
    write_pos = torch.where(key_valid, positions, t)
    ids = torch.randint(0, 95, (b, n), device=DEVICE)
    slots = torch.tensor([2, 0, 3], device=DEVICE)
    launches = []

    def counted(module, name):
        fn = getattr(module, name)

        def run(*args, **kwargs):
            launches.append(name)
            return fn(*args, **kwargs)
        return run

    import diffvoice.kernels.ops as ops
    monkeypatch.setattr(ops, "_rmsnorm_triton", counted(rmsnorm_mod, "rmsnorm"))
    monkeypatch.setattr(ops, "_rotary_triton", counted(rotary_mod, "rotary"))
    out, after = {}, {}
    for backend in ("torch", "triton"):
        monkeypatch.setenv(ENV_VAR, backend)
        kv = [(k.clone(), v.clone()) for k, v in pools]
        out[backend] = model.forward_step(ids, positions, key_valid, kv, slots, cache_lens,
                                          int(cache_lens.max()), write_pos, logits_start)
        after[backend] = kv
    assert out["triton"].shape == (b, n - logits_start, cfg.vocab_size)
    torch.testing.assert_close(out["triton"], out["torch"], rtol=1e-4, atol=1e-4)
    for (k1, v1), (k2, v2) in zip(after["triton"], after["torch"], strict=True):
        torch.testing.assert_close(k1, k2, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(v1, v2, rtol=1e-4, atol=1e-4)
    # per layer: two norms and one rotary; then the final norm (with the last residual add)
    assert launches.count("rmsnorm") == 2 * cfg.num_layers + 1
    assert launches.count("rotary") == cfg.num_layers
    # prediction for chosen window slots alone (EngineConfig.predict_masked): their rows of the
    # whole window's logits, on both paths
    select = torch.stack([torch.randperm(n - logits_start, device=DEVICE)[:3] for _ in range(b)])
    for backend in ("torch", "triton"):
        monkeypatch.setenv(ENV_VAR, backend)
        kv = [(k.clone(), v.clone()) for k, v in pools]
        part = model.forward_step(ids, positions, key_valid, kv, slots, cache_lens,
                                  int(cache_lens.max()), write_pos, logits_start, select=select)
        torch.testing.assert_close(part, out[backend].take_along_dim(select[..., None], 1),
                                   rtol=1e-4, atol=1e-4)


def test_rope_tables_cover_the_canvas_and_match_the_per_pass_tables():
    """The Triton path's rotary reads tables by position: they equal the per-pass tables and
    reach past the trained length when the runner's canvas does."""
    from diffvoice.engine.model import DiffusionLM
    from diffvoice.engine.testing import random_config

    cfg = random_config("sdar", vocab_size=96, mask_token_id=95, eos_ids=(1,),
                        max_position_embeddings=64)
    model = DiffusionLM(cfg)
    cos, sin = model.rope_tables("cpu")
    assert cos.shape == (64, cfg.head_dim)
    cos, sin = model.rope_tables("cpu", 200)
    assert cos.shape[0] >= 200 and model.rope_tables("cpu")[0] is cos  # kept, not rebuilt
    positions = torch.tensor([[0, 5, 63, 64, 199]])
    want_cos, want_sin = model.rotary_tables(positions)
    torch.testing.assert_close(cos[positions[0]], want_cos[0])
    torch.testing.assert_close(sin[positions[0]], want_sin[0])
