"""save_checkpoint writes configs that each family's own code can build the same model from.

The rules below are read from the authors' code at pinned commits (see engine.hf_export) and
re-stated here as plain functions: which config keys they read, the defaults they fall back to,
and the tensor shapes they then allocate. An exported random checkpoint must give exactly the
tensors we saved under those rules; the published configs (tests/assets/real_configs) pass the
same checks, so the rules themselves are not tuned to our output.
"""

import json
from pathlib import Path

import pytest
from safetensors import safe_open

from diffvoice.engine.hf_fields import LLADA_DEFAULTS
from diffvoice.engine.testing import make_random_checkpoint

ASSETS = Path(__file__).parents[1] / "assets" / "real_configs"
# configuration_dream.py (DreamConfig.__init__) / configuration_sdar.py / Qwen2 defaults
DREAM_DEFAULTS = {"pad_token_id": 151643, "tie_word_embeddings": False, "hidden_act": "silu",
                  "use_sliding_window": False, "rope_scaling": None}


def llada_shapes(cfg: dict) -> dict[str, tuple]:
    """Tensors modeling_llada.py (LLaDAModel.__init__, LLaDALlamaBlock) allocates for `cfg`."""
    get = lambda k: cfg.get(k, LLADA_DEFAULTS.get(k))  # noqa: E731
    assert get("block_type") == "llama" and get("rope") and not get("alibi")
    assert get("layer_norm_type") == "rms" and get("block_group_size") == 1
    d, heads = get("d_model"), get("n_heads")
    kv = get("n_kv_heads") or heads
    hidden = get("mlp_hidden_size") or get("mlp_ratio") * d
    out_mult = {"swiglu": 0.5}.get(get("activation_type"), 1.0)  # Activation.output_multiplier
    emb = get("embedding_size") or get("vocab_size")
    shapes = {"model.transformer.wte.weight": (emb, d), "model.transformer.ln_f.weight": (d,)}
    if not get("weight_tying"):
        shapes["model.transformer.ff_out.weight"] = (emb, d)
    for i in range(get("n_layers")):
        p = f"model.transformer.blocks.{i}."
        shapes.update({p + "q_proj.weight": (d, d), p + "k_proj.weight": (kv * d // heads, d),
                       p + "v_proj.weight": (kv * d // heads, d), p + "attn_out.weight": (d, d),
                       p + "ff_proj.weight": (hidden, d), p + "up_proj.weight": (hidden, d),
                       p + "ff_out.weight": (d, int(out_mult * hidden)),
                       p + "attn_norm.weight": (d,), p + "ff_norm.weight": (d,)})
    return shapes


def check_qwen_family(cfg: dict, family: str) -> None:
    """What SDAR's / Fast-dLLM v2's / Dream's modelling code reads beyond the shapes."""
    vocab = cfg["vocab_size"]
    assert cfg.get("hidden_act", "silu") == "silu"
    assert not cfg.get("use_sliding_window", False) and cfg.get("rope_scaling") is None
    pad = cfg.get("pad_token_id", DREAM_DEFAULTS["pad_token_id"] if family == "dream" else None)
    assert pad is None or 0 <= pad < vocab  # nn.Embedding(padding_idx=pad) must accept it
    if family == "sdar":
        assert "fuse_cross_entropy" in cfg  # SDARForCausalLM.forward reads it unconditionally
        assert cfg["block_size"] >= 1 and "mask_token_id" in cfg
        assert cfg.get("attention_bias", False) is False
    if family == "fast_dllm_v2":
        assert cfg["bd_size"] >= 1
        layer_types = cfg.get("layer_types") or ["full_attention"] * cfg["num_hidden_layers"]
        assert set(layer_types) == {"full_attention"}
    if family in ("dream", "fast_dllm_v2"):  # head_dim comes from hidden / heads there
        assert cfg.get("head_dim") in (None, cfg["hidden_size"] // cfg["num_attention_heads"])


@pytest.mark.parametrize("name,family", [("SDAR-4B-Chat", "sdar"), ("SDAR-8B-Chat", "sdar"),
                                         ("Fast_dLLM_v2_7B", "fast_dllm_v2"),
                                         ("Fast_dLLM_v2_1.5B", "fast_dllm_v2"),
                                         ("Dream-v0-Instruct-7B", "dream")])
def test_rules_accept_the_published_configs(name, family):
    check_qwen_family(json.loads((ASSETS / name / "config.json").read_text()), family)


def test_llada_rules_give_the_published_8b_shapes():
    cfg = json.loads((ASSETS / "LLaDA-8B-Instruct" / "config.json").read_text())
    shapes = llada_shapes(cfg)
    assert shapes["model.transformer.blocks.0.ff_out.weight"] == (4096, 12288)
    assert shapes["model.transformer.ff_out.weight"] == (126464, 4096)
    assert len(shapes) == 3 + 9 * 32  # wte, ln_f, ff_out + 9 per block


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2", "dream"])
@pytest.mark.parametrize("tied", [False, True])
def test_exported_qwen_family_config_satisfies_its_code(tmp_path, family, tied):
    path = make_random_checkpoint(tmp_path / "m", family=family, tie_word_embeddings=tied)
    cfg = json.loads((path / "config.json").read_text())
    check_qwen_family(cfg, family)
    assert cfg["tie_word_embeddings"] is tied and cfg["auto_map"]
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        names = set(f.keys())  # noqa: SIM118
        embed = f.get_slice("model.embed_tokens.weight").get_shape()
    assert embed == [cfg["vocab_size"], cfg["hidden_size"]]
    assert ("lm_head.weight" in names) is not tied


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("embedding_size", [None, 512])
def test_exported_llada_config_builds_the_saved_tensors(tmp_path, tied, embedding_size):
    path = make_random_checkpoint(tmp_path / "m", family="llada", tie_word_embeddings=tied,
                                  embedding_size=embedding_size)
    cfg = json.loads((path / "config.json").read_text())
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        saved = {n: tuple(f.get_slice(n).get_shape()) for n in f.keys()}  # noqa: SIM118
    assert saved == llada_shapes(cfg)
    assert cfg["weight_tying"] is tied
    assert 0 <= cfg["pad_token_id"] < cfg["vocab_size"]
    assert cfg["attention_dropout"] == cfg["residual_dropout"] == cfg["embedding_dropout"] == 0.0


def test_the_old_llada_export_would_have_failed_these_rules(tmp_path):
    """The size mismatch issue 13 reported: without activation_type the authors' code takes
    swiglu and halves ff_out's input; without rope it adds learned positions."""
    path = make_random_checkpoint(tmp_path / "m", family="llada")
    cfg = json.loads((path / "config.json").read_text())
    old = {k: v for k, v in cfg.items() if k not in ("activation_type",)}
    old_shapes = llada_shapes({**old, "activation_type": LLADA_DEFAULTS["activation_type"]})
    with safe_open(str(path / "model.safetensors"), framework="pt") as f:
        name = "model.transformer.blocks.0.ff_out.weight"
        assert tuple(f.get_slice(name).get_shape()) != old_shapes[name]
