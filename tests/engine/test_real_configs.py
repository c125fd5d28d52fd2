"""The published configs of real dLLM checkpoints (tests/assets/real_configs, provenance in its
README) still load: family and shapes as their model cards state, stop tokens resolved from
config.json + generation_config.json + the chat template, math-changing fields refused by name,
their no-op values accepted. A tiny vocabulary stands in for the 150k-token ones; the special
tokens keep their real ids."""

import json
import shutil
from pathlib import Path

import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

from diffvoice.engine.bpe_files import QWEN2_PRETOKENIZE_REGEX, tokenizer_from_bpe_files
from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import read_config
from diffvoice.engine.testing import CORPUS

ASSETS = Path(__file__).parents[1] / "assets" / "real_configs"

# name: (family, hidden, layers, heads, kv_heads, head_dim, intermediate, block, tied, vocab)
SHAPES = {
    "SDAR-4B-Chat": ("sdar", 2560, 36, 32, 8, 128, 9728, 4, False, 151936),
    "SDAR-8B-Chat": ("sdar", 4096, 36, 32, 8, 128, 12288, 4, False, 151936),
    "Fast_dLLM_v2_7B": ("fast_dllm_v2", 3584, 28, 28, 4, 128, 18944, 32, False, 152064),
    "Fast_dLLM_v2_1.5B": ("fast_dllm_v2", 1536, 28, 12, 2, 128, 8960, 32, True, 151936),
    "Dream-v0-Instruct-7B": ("dream", 3584, 28, 28, 4, 128, 18944, 0, False, 152064),
    "LLaDA-8B-Instruct": ("llada", 4096, 32, 32, 32, 128, 12288, 0, False, 126464),
}
# name: (mask id, stop ids) -- stop ids: config eos, generation_config eos, tokenizer eos and the
# template's end-of-turn token (<|im_end|> 151645 for ChatML, <|eot_id|> 126348 for LLaDA)
IDS = {
    "SDAR-4B-Chat": (151669, {151643, 151645}),
    "SDAR-8B-Chat": (151669, {151643, 151645}),
    "Fast_dLLM_v2_7B": (151665, {151643, 151645}),  # no mask_token_id: the |<MASK>| token
    "Dream-v0-Instruct-7B": (151666, {151643, 151645}),
    "LLaDA-8B-Instruct": (126336, {126081, 126348}),
}


def raw_config(name: str) -> dict:
    return json.loads((ASSETS / name / "config.json").read_text())


def checkpoint_dir(tmp_path: Path, name: str) -> Path:
    """The model's small files plus a tiny byte-level vocabulary (ids < 300, far below the
    special tokens' real ids), as vocab.json + merges.txt or, for LLaDA, a tokenizer.json."""
    out = tmp_path / name
    shutil.copytree(ASSETS / name, out)
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.train_from_iterator(CORPUS.splitlines(), trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    bpe.model.save(str(out))  # vocab.json + merges.txt
    if name.startswith("LLaDA"):  # LLaDA ships tokenizer.json (PreTrainedTokenizerFast)
        cfg = json.loads((out / "tokenizer_config.json").read_text())
        cfg.pop("tokenizer_class")
        tokenizer_from_bpe_files(out, cfg).save(str(out / "tokenizer.json"))
        (out / "vocab.json").unlink()
        (out / "merges.txt").unlink()
    return out


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_published_config_parses(name):
    cfg = ModelConfig.from_hf(raw_config(name), source=name)
    family, hidden, layers, heads, kv, head_dim, inter, block, tied, vocab = SHAPES[name]
    assert (cfg.family, cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.num_kv_heads,
            cfg.head_dim, cfg.intermediate_size, cfg.block_size, cfg.tie_word_embeddings,
            cfg.vocab_size) == (family, hidden, layers, heads, kv, head_dim, inter, block, tied,
                                vocab)
    assert cfg.rope_scaling is None
    assert ModelConfig.from_hf(cfg.to_hf()) == cfg  # our export reads back the same


@pytest.mark.parametrize("name", sorted(IDS))
def test_published_checkpoint_files_resolve_mask_and_stop_ids(tmp_path, name):
    cfg, tok = read_config(checkpoint_dir(tmp_path, name))
    mask, stops = IDS[name]
    assert cfg.mask_token_id == mask
    assert set(cfg.eos_token_ids) == stops
    text = tok.render([{"role": "user", "content": "Hi"}])
    ids = tok.encode(text)
    assert all(tok.tokenizer.id_to_token(i) is not None for i in ids)
    if name.startswith("LLaDA"):
        assert text.endswith("<|start_header_id|>assistant<|end_header_id|>\n\n")
        assert 126346 in ids and 126347 in ids  # header tokens encoded as their real ids
    else:
        assert text.endswith("<|im_start|>assistant\n") and 151644 in ids


REFUSED = [
    ("SDAR-4B-Chat", {"use_sliding_window": True}, "use_sliding_window"),
    ("SDAR-4B-Chat", {"hidden_act": "gelu"}, "hidden_act"),
    ("SDAR-4B-Chat", {"attention_bias": True}, "attention_bias"),
    ("SDAR-8B-Chat", {"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "rope_type"),
    ("Fast_dLLM_v2_7B", {"layer_types": ["sliding_attention"] * 28}, "layer_types"),
    ("Fast_dLLM_v2_7B", {"rope_scaling": {"rope_type": "longrope", "factor": 2.0}}, "rope_type"),
    ("Dream-v0-Instruct-7B", {"use_mrope": True}, "use_mrope"),
    ("Dream-v0-Instruct-7B", {"head_dim": 64}, "head_dim"),
    ("LLaDA-8B-Instruct", {"input_emb_norm": True}, "input_emb_norm"),
    ("LLaDA-8B-Instruct", {"scale_logits": True}, "scale_logits"),
    ("LLaDA-8B-Instruct", {"layer_norm_type": "default"}, "layer_norm_type"),
    ("LLaDA-8B-Instruct", {"activation_type": "swiglu"}, "activation_type"),
    ("LLaDA-8B-Instruct", {"alibi": True, "rope": False}, "alibi"),
    ("LLaDA-8B-Instruct", {"include_qkv_bias": True}, "include_qkv_bias"),
    ("LLaDA-8B-Instruct", {"block_type": "sequential"}, "block_type"),
    ("LLaDA-8B-Instruct", {"bias_for_layer_norm": True}, "bias_for_layer_norm"),
]


@pytest.mark.parametrize("name,change,field", REFUSED)
def test_math_changing_field_is_refused_by_name(name, change, field):
    raw = {**raw_config(name), **change}
    with pytest.raises(ValueError, match=rf"{name}: .*{field}"):
        ModelConfig.from_hf(raw, source=name)


@pytest.mark.parametrize("name,change", [
    ("SDAR-4B-Chat", {"sliding_window": 4096}),  # ignored while use_sliding_window is false
    ("SDAR-4B-Chat", {"rope_scaling": {"type": "default"}}),
    ("Dream-v0-Instruct-7B", {"use_mrope": False, "hidden_act": "silu"}),
    ("Fast_dLLM_v2_7B", {"rope_scaling": None, "layer_types": None}),
    ("LLaDA-8B-Instruct", {"alibi": False, "flash_attention": True, "rope_full_precision": False}),
])
def test_no_op_values_load(name, change):
    base = ModelConfig.from_hf(raw_config(name))
    assert ModelConfig.from_hf({**raw_config(name), **change}) == base


def test_llada_absent_keys_take_configuration_llada_defaults():
    raw = raw_config("LLaDA-8B-Instruct")
    tied = {k: v for k, v in raw.items() if k != "weight_tying"}
    assert ModelConfig.from_hf(tied).tie_word_embeddings  # ModelConfig.weight_tying = True
    for key in ("activation_type", "rope", "layer_norm_type", "block_type"):
        without = {k: v for k, v in raw.items() if k != key}
        with pytest.raises(ValueError, match=rf"{key} .*absent: configuration_llada\.py default"):
            ModelConfig.from_hf(without)
    no_embedding = {k: v for k, v in raw.items() if k != "embedding_size"}  # default 50304
    with pytest.raises(ValueError, match=r"embedding_size \(50304\) .*absent"):
        ModelConfig.from_hf(no_embedding)
    no_mlp = {k: v for k, v in raw.items() if k not in ("mlp_hidden_size", "n_kv_heads")}
    cfg = ModelConfig.from_hf(no_mlp)
    assert cfg.intermediate_size == 4 * 4096 and cfg.num_kv_heads == 32  # mlp_ratio 4; n_heads
    assert ModelConfig.from_hf({**no_mlp, "multi_query_attention": True}).num_kv_heads == 1
