"""Which config.json fields change a family's math, and the values this engine implements.

`check_fields(raw, family, source)` raises ValueError naming the first field whose value would make
the checkpoint compute something engine.model does not (a sliding window, another activation,
LLaDA's input-embedding scaling, ...). A field at its no-op value (`use_sliding_window: false`,
`rope_scaling: null`, `alibi: false`) passes. Training-only fields (dropouts, fused losses,
attention backends, init schemes) are not looked at.

`llada_value(raw, name)` reads a LLaDA field with the default that the authors'
configuration_llada.py (ModelConfig) gives it when the key is absent: a LLaDA config that omits
`weight_tying` is tied, one that omits `activation_type` uses SwiGLU (refused here), and so on.
Defaults read from NVlabs/Fast-dLLM llada/model/configuration_llada.py at commit 24cc59e7.

Knows nothing about weights, tokenizers or decoding.
"""

from __future__ import annotations

from typing import Any

# configuration_llada.py ModelConfig defaults for the fields the engine reads or checks.
LLADA_DEFAULTS: dict[str, Any] = {
    "d_model": 768, "n_heads": 12, "n_kv_heads": None, "n_layers": 12, "mlp_ratio": 4,
    "mlp_hidden_size": None, "activation_type": "swiglu", "block_type": "sequential",
    "block_group_size": 1, "alibi": False, "rope": False, "multi_query_attention": None,
    "attention_layer_norm": False, "input_emb_norm": False, "layer_norm_type": "default",
    "layer_norm_with_affine": True, "rms_norm_eps": 1e-05, "max_sequence_length": 1024,
    "rope_theta": 10000.0, "include_qkv_bias": False, "include_bias": False,
    "bias_for_layer_norm": None, "scale_logits": False, "vocab_size": 50257,
    "embedding_size": 50304, "weight_tying": True,
}

# LLaDA field -> the one value engine.model implements (the LLaMA-style block of LLaDA-8B).
_LLADA_REQUIRED: dict[str, Any] = {
    "activation_type": "silu",      # swiglu would halve ff_proj's output (another block shape)
    "block_type": "llama",          # sequential/parallel fuse q/k/v into one att_proj
    "block_group_size": 1,          # >1 stores blocks as block_groups.N.M (other tensor names)
    "alibi": False,                 # ALiBi attention bias instead of RoPE
    "rope": True,                   # without RoPE (and ALiBi) LLaDA adds learned positions (wpe)
    "layer_norm_type": "rms",       # default/low_precision = LayerNorm, gemma_rms = (1 + w)
    "layer_norm_with_affine": True,
    "attention_layer_norm": False,  # q/k norms over the whole projection
    "input_emb_norm": False,        # scales embeddings by sqrt(d_model)
    "scale_logits": False,          # scales logits by 1/sqrt(d_model)
    "include_bias": False,
    "include_qkv_bias": False,
}

# Qwen-style families (SDAR, Fast-dLLM v2, Dream): field -> values that leave the math unchanged.
_QWEN_NOOP: dict[str, tuple] = {
    "hidden_act": ("silu",),
    "use_sliding_window": (False, None),
    "use_mrope": (False, None),
    "mlp_bias": (False, None),
    "partial_rotary_factor": (1, 1.0, None),
    "attn_logit_softcapping": (None,),
    "final_logit_softcapping": (None,),
    "num_experts": (None, 0),
}
_QWEN3_NOOP: dict[str, tuple] = {"attention_bias": (False, None)}  # q/k/v/o biases in Qwen3
ROPE_TYPES = ("default", "linear", "llama3", "yarn")  # implemented in engine.rope


def _refuse(source: str, name: str, value: Any, supported: str) -> ValueError:
    return ValueError(f"{source}: {name} = {value!r} changes the model's math and is not "
                      f"supported by this engine (supported: {supported})")


def llada_value(raw: dict, name: str) -> Any:
    """A LLaDA config field, or configuration_llada.py's default when the key is absent."""
    return raw[name] if name in raw else LLADA_DEFAULTS[name]


def rope_scaling_of(raw: dict) -> dict | None:
    """The config's rope scaling dict (rope_scaling, or transformers 5's rope_parameters),
    None when it is absent or of type "default"."""
    scaling = raw.get("rope_scaling")
    if scaling is None and isinstance(raw.get("rope_parameters"), dict):
        scaling = raw["rope_parameters"]
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise ValueError(f"rope_scaling must be an object or null, got {scaling!r}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    return None if kind == "default" else {**scaling, "rope_type": kind}


def check_fields(raw: dict, family: str, source: str = "config.json") -> None:
    """Raise ValueError naming the first field whose value this engine cannot compute."""
    if family == "llada":
        for name, want in _LLADA_REQUIRED.items():
            value = llada_value(raw, name)
            if value != want:
                why = "absent: configuration_llada.py default " if name not in raw else ""
                raise _refuse(source, name, value, f"{want!r}" + (f"; {why}{value!r}" if why
                                                                  else ""))
        if llada_value(raw, "bias_for_layer_norm"):
            raise _refuse(source, "bias_for_layer_norm", raw["bias_for_layer_norm"], "false/null")
        if raw.get("clip_qkv") is not None:
            raise _refuse(source, "clip_qkv", raw["clip_qkv"], "null")
        return
    noop = dict(_QWEN_NOOP, **(_QWEN3_NOOP if family == "sdar" else {}))
    for name, values in noop.items():
        if name in raw and raw[name] not in values:
            raise _refuse(source, name, raw[name], " or ".join(repr(v) for v in values))
    layer_types = raw.get("layer_types")
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        odd = next(t for t in layer_types if t != "full_attention")
        raise _refuse(source, "layer_types", odd, "'full_attention' for every layer")
    try:
        scaling = rope_scaling_of(raw)
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from None
    if scaling is not None and scaling["rope_type"] not in ROPE_TYPES:
        raise _refuse(source, "rope_scaling.rope_type", scaling["rope_type"],
                      ", ".join(repr(t) for t in ROPE_TYPES))
