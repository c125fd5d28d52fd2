"""The config.json fields each family's own modelling code needs to load an exported checkpoint.

`family_fields(cfg)` returns the keys that `ModelConfig.to_hf` adds beyond the shapes: the values
the authors' code reads and would otherwise take from its own defaults, which differ from what the
engine computed. Read in (pinned commits):
  SDAR     JetAstra/SDAR c2041a83 training/model/SDAR-4B-Chat/{configuration,modeling}_sdar.py:
           forward reads `config.fuse_cross_entropy` (AttributeError without it).
  Dream    DreamLM/Dream fac0a7f2 / NVlabs/Fast-dLLM 24cc59e7 dream/model/configuration_dream.py:
           pad_token_id defaults to 151643, the Embedding's padding_idx (fails on a small vocab).
  LLaDA    NVlabs/Fast-dLLM 24cc59e7 llada/model/configuration_llada.py: activation_type defaults
           to swiglu (halves ff_out's input: a size mismatch), rope to false, layer_norm_type to
           LayerNorm, weight_tying to true, embedding_size to 50304, dropouts to 0.1.
  Fast-dLLM v2 (configuration.py of Efficient-Large-Model/Fast_dLLM_v2_7B): bd_size, layer_types.
The `auto_map` entries match the published checkpoints: copying the family's .py files into the
exported directory makes `AutoModel.from_pretrained(dir, trust_remote_code=True)` load it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from diffvoice.engine.config import ModelConfig

_AUTO_MAP = {
    "sdar": {"AutoConfig": "configuration_sdar.SDARConfig",
             "AutoModel": "modeling_sdar.SDARModel",
             "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
    "fast_dllm_v2": {"AutoConfig": "configuration.Fast_dLLM_QwenConfig",
                     "AutoModel": "modeling.Fast_dLLM_QwenModel",
                     "AutoModelForCausalLM": "modeling.Fast_dLLM_QwenForCausalLM"},
    "dream": {"AutoConfig": "configuration_dream.DreamConfig",
              "AutoModel": "modeling_dream.DreamModel"},
    "llada": {"AutoConfig": "configuration_llada.LLaDAConfig",
              "AutoModelForCausalLM": "modeling_llada.LLaDAModelLM",
              "AutoModel": "modeling_llada.LLaDAModelLM"},
}


def family_fields(cfg: ModelConfig) -> dict:
    """Extra config.json keys for `cfg.family` (see the module docstring for why each)."""
    eos = cfg.eos_token_ids[0] if cfg.eos_token_ids else None
    out: dict = {"auto_map": _AUTO_MAP[cfg.family]}
    if cfg.family == "llada":
        out.update(
            activation_type="silu", block_type="llama", block_group_size=1, alibi=False,
            rope=True, rope_full_precision=True, layer_norm_type="rms",
            layer_norm_with_affine=True, bias_for_layer_norm=False, attention_layer_norm=False,
            input_emb_norm=False, scale_logits=False, include_bias=False, include_qkv_bias=False,
            multi_query_attention=None, embedding_size=cfg.num_embeddings, pad_token_id=eos,
            attention_dropout=0.0, residual_dropout=0.0, embedding_dropout=0.0, use_cache=False)
        return out
    out.update(use_sliding_window=False, sliding_window=None, max_window_layers=cfg.num_layers,
               attention_dropout=0.0)
    if cfg.family == "sdar":
        out.update(fuse_cross_entropy=True, attention_bias=False, use_cache=False)
    elif cfg.family == "fast_dllm_v2":
        out.update(layer_types=["full_attention"] * cfg.num_layers)
    elif cfg.family == "dream":
        out.update(pad_token_id=eos)
    return out
