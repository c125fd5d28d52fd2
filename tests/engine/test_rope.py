"""rope_scaling linear / llama3 / yarn: inverse frequencies and attention factor as transformers'
modeling_rope_utils computes them, and a yarn-scaled checkpoint's logits equal transformers' Qwen2
(the attention factor on cos/sin included)."""

import pytest
import torch
from safetensors.torch import load_file

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.rope import inv_freq
from diffvoice.engine.testing import make_random_checkpoint

SCALINGS = [
    {"rope_type": "linear", "factor": 4.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
    {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 4096,
     "beta_fast": 16, "beta_slow": 2, "mscale": 0.8, "mscale_all_dim": 0.5},
    {"rope_type": "yarn", "factor": 2.0, "attention_factor": 1.3, "truncate": False},
]


@pytest.mark.parametrize("scaling", SCALINGS, ids=lambda s: s["rope_type"])
@pytest.mark.parametrize("head_dim,theta", [(64, 10000.0), (128, 1000000.0)])
def test_inv_freq_matches_transformers(scaling, head_dim, theta):
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    max_pos = 131072
    cfg = transformers.Qwen2Config(hidden_size=head_dim * 4, num_attention_heads=4,
                                   max_position_embeddings=max_pos,
                                   rope_parameters={**scaling, "rope_theta": theta})
    want, want_factor = ROPE_INIT_FUNCTIONS[scaling["rope_type"]](cfg, "cpu")
    got, got_factor = inv_freq(head_dim, theta, scaling, max_pos)
    torch.testing.assert_close(got, want.float(), rtol=1e-6, atol=0)
    assert got_factor == pytest.approx(want_factor, rel=1e-12)


def test_old_style_type_key_and_default_are_read():
    raw = ModelConfig(family="dream", vocab_size=50, hidden_size=32, num_layers=1, num_heads=4,
                      num_kv_heads=2, head_dim=8, intermediate_size=64, mask_token_id=1).to_hf()
    assert ModelConfig.from_hf({**raw, "rope_scaling": {"type": "default"}}).rope_scaling is None
    cfg = ModelConfig.from_hf({**raw, "rope_scaling": {"type": "linear", "factor": 2.0}})
    assert cfg.rope_scaling == {"type": "linear", "factor": 2.0, "rope_type": "linear"}
    params = {"rope_parameters": {"rope_type": "default", "rope_theta": 5e5}}  # transformers 5
    raw5 = {k: v for k, v in raw.items() if k not in ("rope_theta", "rope_scaling")}
    assert ModelConfig.from_hf({**raw5, **params}).rope_theta == 5e5
    with pytest.raises(ValueError, match="rope_scaling"):
        ModelConfig(family="dream", vocab_size=50, hidden_size=32, num_layers=1, num_heads=4,
                    num_kv_heads=2, head_dim=8, intermediate_size=64,
                    rope_scaling={"rope_type": "dynamic", "factor": 2.0})


def test_yarn_checkpoint_logits_match_transformers_qwen2(tmp_path):
    transformers = pytest.importorskip("transformers")
    scaling = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}
    path = make_random_checkpoint(tmp_path, family="dream", seed=5, init_std=0.1,
                                  max_position_embeddings=256, rope_scaling=scaling)
    ours = load_checkpoint(path)
    cfg = ours.config
    assert cfg.rope_scaling["rope_type"] == "yarn"
    ref = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        intermediate_size=cfg.intermediate_size, rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings, attn_implementation="eager",
        rope_parameters={**scaling, "rope_theta": cfg.rope_theta}))
    missing, unexpected = ref.load_state_dict(load_file(path / "model.safetensors"), strict=False)
    assert not missing and not unexpected
    ref.eval()
    n = 40
    ids = torch.randint(0, cfg.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    pos = torch.arange(100, 100 + n)[None]  # past original_max_position_embeddings
    full = torch.zeros(1, 1, n, n)  # Dream: bidirectional
    with torch.no_grad():
        want = ref(input_ids=ids, position_ids=pos, attention_mask={"full_attention": full}).logits
        got = ours.model(ids, pos)
        plain = load_checkpoint(path).model
        plain.config = ModelConfig(**{**cfg.as_dict(), "rope_scaling": None})
        unscaled = plain(ids, pos)
    assert (got - want).abs().max().item() <= 1e-4
    assert (unscaled - want).abs().max().item() > 1e-3  # the scaling mattered
