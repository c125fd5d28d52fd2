"""Each family's checkpoint, written in its real tensor naming and loaded through the public
loader, gives the logits of an independent implementation (fp32, max abs diff <= 1e-4):
transformers' Qwen2/Qwen3 modeling with an explicit 4D mask, and for LLaDA a plain-PyTorch
forward written here from its description (OLMo-style LLaMA block)."""

import json
import math

import pytest
import torch
from safetensors.torch import load_file

from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.testing import make_random_checkpoint

TOL = 1e-4


def family_mask(cfg, n):
    pos = torch.arange(n)
    if cfg.block_causal:
        blk = pos // cfg.block_size
        return blk[None, :] <= blk[:, None]  # [Lq, Lk]
    return torch.ones(n, n, dtype=torch.bool)


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "dream"])
def test_qwen_families_match_transformers(tmp_path, family):
    transformers = pytest.importorskip("transformers")
    path = make_random_checkpoint(tmp_path, family=family, seed=3, init_std=0.1,
                                  num_layers=3, tie_word_embeddings=(family == "dream"))
    ours = load_checkpoint(path)
    cfg = ours.config
    hf_kwargs = dict(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
                     num_hidden_layers=cfg.num_layers, num_attention_heads=cfg.num_heads,
                     num_key_value_heads=cfg.num_kv_heads, intermediate_size=cfg.intermediate_size,
                     rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps,
                     tie_word_embeddings=cfg.tie_word_embeddings, attn_implementation="eager",
                     max_position_embeddings=cfg.max_position_embeddings)
    if family == "sdar":
        ref = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=cfg.head_dim,
                                                                     **hf_kwargs))
    else:
        ref = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**hf_kwargs))
    missing, unexpected = ref.load_state_dict(load_file(path / "model.safetensors"), strict=False)
    assert not unexpected
    assert set(missing) <= ({"lm_head.weight"} if cfg.tie_word_embeddings else set())
    if cfg.tie_word_embeddings:
        ref.tie_weights()
    ref.eval()

    torch.manual_seed(0)
    n = 19  # odd: a partial last block
    ids = torch.randint(0, cfg.vocab_size, (2, n))
    allowed = family_mask(cfg, n)
    additive = torch.zeros(n, n).masked_fill(~allowed, float("-inf"))[None, None].expand(2, 1, n, n)
    with torch.no_grad():
        expected = ref(input_ids=ids, attention_mask={"full_attention": additive},
                       position_ids=torch.arange(n)[None].expand(2, n)).logits
        got = ours.model(ids, torch.arange(n)[None].expand(2, n))
    assert got.shape == expected.shape
    assert (got - expected).abs().max().item() <= TOL


def llada_reference(tensors: dict, cfg: dict, ids: torch.Tensor) -> torch.Tensor:
    """LLaDA-8B's forward from its description: pre-norm LLaMA blocks (RMSNorm, RoPE with
    rotate_half, multi-head attention without any mask, SwiGLU as silu(ff_proj) * up_proj then
    ff_out), final ln_f, untied output projection ff_out."""
    d, h = cfg["d_model"], cfg["n_heads"]
    hd, eps = d // h, cfg["rms_norm_eps"]

    def rms(x, w):
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    b, n = ids.shape
    inv = 1.0 / (cfg["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    ang = torch.arange(n).float()[:, None] * inv[None]
    cos, sin = torch.cat([ang, ang], -1).cos(), torch.cat([ang, ang], -1).sin()

    def rope(x):  # [b, h, n, hd]
        x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = tensors["model.transformer.wte.weight"][ids]
    for i in range(cfg["n_layers"]):
        p = lambda name, i=i: tensors[f"model.transformer.blocks.{i}.{name}.weight"]  # noqa: E731
        y = rms(x, p("attn_norm"))
        q, k, v = ((y @ p(n_).T).view(b, n, h, hd).transpose(1, 2)
                   for n_ in ("q_proj", "k_proj", "v_proj"))
        q, k = rope(q), rope(k)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1) @ v
        x = x + att.transpose(1, 2).reshape(b, n, d) @ p("attn_out").T
        y = rms(x, p("ff_norm"))
        gated = torch.nn.functional.silu(y @ p("ff_proj").T) * (y @ p("up_proj").T)
        x = x + gated @ p("ff_out").T
    x = rms(x, tensors["model.transformer.ln_f.weight"])
    return x @ tensors["model.transformer.ff_out.weight"].T


def test_llada_matches_plain_reference(tmp_path):
    path = make_random_checkpoint(tmp_path, family="llada", seed=4, init_std=0.1, num_layers=3)
    ours = load_checkpoint(path)
    cfg = json.loads((path / "config.json").read_text())
    tensors = load_file(path / "model.safetensors")
    torch.manual_seed(1)
    ids = torch.randint(0, cfg["vocab_size"], (2, 17))
    with torch.no_grad():
        got = ours.model(ids, torch.arange(17)[None].expand(2, 17))
        expected = llada_reference(tensors, cfg, ids)
    assert (got - expected).abs().max().item() <= TOL


def test_sharded_checkpoint_loads_identically(tmp_path):
    single = load_checkpoint(make_random_checkpoint(tmp_path / "a", family="sdar", seed=5))
    sharded_dir = make_random_checkpoint(tmp_path / "b", family="sdar", seed=5, shard_size=7)
    assert (sharded_dir / "model.safetensors.index.json").is_file()
    sharded = load_checkpoint(sharded_dir)
    ids = torch.randint(0, single.config.vocab_size, (1, 9))
    pos = torch.arange(9)[None]
    assert torch.equal(single.model(ids, pos), sharded.model(ids, pos))


def test_bf16_and_fp16_load(tmp_path):
    path = make_random_checkpoint(tmp_path, family="fast_dllm_v2", seed=6)
    ref = load_checkpoint(path, dtype="float32")
    ids = torch.randint(0, ref.config.vocab_size, (1, 8))
    pos = torch.arange(8)[None]
    for dtype, tol in (("bfloat16", 0.05), ("float16", 0.01)):
        low = load_checkpoint(path, dtype=dtype)
        assert next(low.model.parameters()).dtype == getattr(torch, dtype)
        diff = (low.model(ids, pos).float() - ref.model(ids, pos)).abs().max().item()
        assert diff < tol, (dtype, diff)
