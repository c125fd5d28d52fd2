"""Loader errors name the file and the tensor; ids come from the checkpoint's own files."""

import json

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import load_checkpoint, read_config, read_default_decoding
from diffvoice.engine.testing import make_random_checkpoint


@pytest.fixture
def ckpt(tmp_path):
    return make_random_checkpoint(tmp_path / "m", family="sdar")


def test_ids_come_from_checkpoint_files(ckpt):
    cfg, tok = read_config(ckpt)
    assert cfg.mask_token_id == tok.token_id("<|mask|>")
    assert tok.token_id("<|im_end|>") in cfg.eos_token_ids
    # generation_config.json adds stop ids
    (ckpt / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 1]}))
    cfg2, _ = read_config(ckpt)
    assert {0, 1} <= set(cfg2.eos_token_ids)
    # without mask_token_id in config.json the tokenizer's mask token is used
    raw = json.loads((ckpt / "config.json").read_text())
    raw.pop("mask_token_id")
    (ckpt / "config.json").write_text(json.dumps(raw))
    assert read_config(ckpt)[0].mask_token_id == tok.token_id("<|mask|>")


def test_unknown_architecture(ckpt):
    raw = json.loads((ckpt / "config.json").read_text())
    raw.update(architectures=["GPT2LMHeadModel"], model_type="gpt2")
    (ckpt / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"config\.json: unknown architecture"):
        load_checkpoint(ckpt)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "model.safetensors"])
def test_missing_file_is_named(ckpt, name):
    (ckpt / name).unlink()
    with pytest.raises(FileNotFoundError, match=name.replace(".", r"\.")):
        load_checkpoint(ckpt)


def test_missing_tensor_is_named(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_norm.weight"]
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.1\.self_attn\.k_norm"):
        load_checkpoint(ckpt)


def test_shape_mismatch_names_file_and_tensor(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    tensors["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model\.safetensors: tensor "
                                         r"'model\.layers\.0\.mlp\.up_proj\.weight' has shape"):
        load_checkpoint(ckpt)


def test_unexpected_tensor_is_named(ckpt):
    tensors = load_file(ckpt / "model.safetensors")
    tensors["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(64)  # SDAR has no QKV bias
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unexpected tensors .*q_proj\.bias"):
        load_checkpoint(ckpt)


def test_sharded_index_pointing_to_missing_shard(tmp_path):
    path = make_random_checkpoint(tmp_path / "s", family="sdar", shard_size=5)
    victim = sorted(path.glob("model-*.safetensors"))[1]
    victim.unlink()
    with pytest.raises(FileNotFoundError, match=victim.name):
        load_checkpoint(path)


def test_config_roundtrip_every_family():
    for family in ("sdar", "fast_dllm_v2", "dream", "llada"):
        cfg = ModelConfig(family=family, vocab_size=50, hidden_size=32, num_layers=2,
                          num_heads=4, num_kv_heads=4 if family == "llada" else 2, head_dim=8,
                          intermediate_size=64, block_size=4 if family in ("sdar",
                                                                           "fast_dllm_v2") else 0,
                          mask_token_id=7, eos_token_ids=(3,))
        assert ModelConfig.from_hf(cfg.to_hf()) == cfg


def test_config_validation_names_field():
    with pytest.raises(ValueError, match="num_kv_heads"):
        ModelConfig(family="sdar", vocab_size=10, hidden_size=8, num_layers=1, num_heads=3,
                    num_kv_heads=2, head_dim=8, intermediate_size=8, block_size=4)
    with pytest.raises(ValueError, match="block_size"):
        ModelConfig(family="sdar", vocab_size=10, hidden_size=8, num_layers=1, num_heads=2,
                    num_kv_heads=2, head_dim=8, intermediate_size=8)


# ---------------------------------------------------------------- tied output head (issue 13)
@pytest.mark.parametrize("family,head", [("sdar", "lm_head.weight"),
                                         ("llada", "model.transformer.ff_out.weight")])
def test_tied_checkpoint_that_also_stores_the_head_equal_to_the_embedding(tmp_path, family, head):
    path = make_random_checkpoint(tmp_path / "t", family=family, tie_word_embeddings=True)
    tensors = load_file(path / "model.safetensors")
    embed = next(v for k, v in tensors.items() if k.endswith(("embed_tokens.weight", "wte.weight")))
    tensors[head] = embed.clone()
    save_file(tensors, str(path / "model.safetensors"))
    loaded = load_checkpoint(path)
    assert loaded.config.tie_word_embeddings
    m = loaded.model
    assert m.lm_head.weight.data_ptr() == m.embed.weight.data_ptr()  # still one tensor
    assert torch.equal(m.lm_head.weight, embed)


@pytest.mark.parametrize("family,head", [("dream", "lm_head.weight"),
                                         ("llada", "model.transformer.ff_out.weight")])
def test_tied_checkpoint_with_a_different_stored_head_uses_it_as_transformers_does(
        tmp_path, family, head, caplog):
    """transformers 5.x: 'both are present in the checkpoints with different values, so we will
    NOT tie them' -- the stored head is used. Checked here against our own logits."""
    path = make_random_checkpoint(tmp_path / "t", family=family, tie_word_embeddings=True)
    tensors = load_file(path / "model.safetensors")
    vocab_rows = next(v for k, v in tensors.items()
                      if k.endswith(("embed_tokens.weight", "wte.weight"))).shape
    stored = torch.randn(vocab_rows, generator=torch.Generator().manual_seed(1))
    tensors[head] = stored
    save_file(tensors, str(path / "model.safetensors"))
    with caplog.at_level("WARNING", logger="diffvoice.loader"):
        loaded = load_checkpoint(path)
    assert "holds different values" in caplog.text and head in caplog.text
    m = loaded.model
    assert not loaded.config.tie_word_embeddings
    assert m.lm_head.weight.data_ptr() != m.embed.weight.data_ptr()
    assert torch.equal(m.lm_head.weight, stored)
    ids = torch.tensor([[1, 2, 3]])
    pos = torch.arange(3)[None]
    with torch.no_grad():
        hidden_logits = m(ids, pos)
        m.lm_head.weight.copy_(m.embed.weight)  # the tied answer differs: the stored head counted
        tied_logits = m(ids, pos)
    assert not torch.allclose(hidden_logits, tied_logits)



@pytest.mark.parametrize("shard_size", [None, 5])
def test_saved_weights_get_the_umask_mode_not_0600(tmp_path, shard_size):
    import os
    import stat

    path = make_random_checkpoint(tmp_path / "w", family="sdar", shard_size=shard_size)
    umask = os.umask(0)
    os.umask(umask)
    weights = list(path.glob("*.safetensors"))
    assert weights
    for w in weights:
        assert stat.S_IMODE(w.stat().st_mode) == 0o666 & ~umask, w


def test_checkpoint_names_its_default_decoding(ckpt):
    """generation_config.json's "decoding" is what SamplingParams(decoding=None) decodes with
    (diffvoice's receptionists: "fast"); without it, the family's authors' decoding; an explicit
    request setting wins; a bad value names the file."""
    assert read_default_decoding(ckpt) == "reference"
    gen_file = ckpt / "generation_config.json"
    gen = json.loads(gen_file.read_text())
    gen_file.write_text(json.dumps({**gen, "decoding": "fast"}))
    assert load_checkpoint(ckpt).default_decoding == "fast"
    engine = Engine.from_pretrained(ckpt, EngineConfig(max_running=1, dtype="float32"))
    try:
        hello = [{"role": "user", "content": "hello"}]
        assert engine.prepare(hello, SamplingParams()).rules.decoding == "fast"
        explicit = engine.prepare(hello, SamplingParams(decoding="reference"))
        assert explicit.rules.decoding == "reference" and explicit.params.policy == "sdar_dynamic"
    finally:
        engine.close()
    gen_file.write_text(json.dumps({**gen, "decoding": "quick"}))
    with pytest.raises(ValueError, match=r"generation_config\.json: decoding must be one of"):
        load_checkpoint(ckpt)
