"""Model configuration: one frozen dataclass covering the open chat dLLM families.

`ModelConfig.from_hf(config_json_dict)` reads a checkpoint's own config.json and decides the family;
`to_hf()` writes one back (used for the shipped model and random-weight fixtures). Knows nothing
about weights, tokenizers or decoding.

Families (what differs between them is data, not code paths):
  family         layout  attention      logit shift  examples
  sdar           qwen3   block-causal   no           SDAR-*-Chat, diffvoice receptionist-tiny
  fast_dllm_v2   qwen2   block-causal   yes          Efficient-Large-Model/Fast_dLLM_v2_*
  dream          qwen2   bidirectional  yes          Dream-v0-Instruct-7B
  llada          llada   bidirectional  no           GSAI-ML/LLaDA-8B-Instruct
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from diffvoice.engine.hf_export import family_fields
from diffvoice.engine.hf_fields import ROPE_TYPES, check_fields, llada_value, rope_scaling_of

FAMILIES = {
    # family: (layout, block_causal, logit_shift)
    "sdar": ("qwen3", True, False),
    "fast_dllm_v2": ("qwen2", True, True),
    "dream": ("qwen2", False, True),
    "llada": ("llada", False, False),
}

_ARCHITECTURES = {
    "SDARForCausalLM": "sdar",
    "Fast_dLLM_QwenForCausalLM": "fast_dllm_v2",
    "DreamModel": "dream",
    "LLaDAModelLM": "llada",
}
_MODEL_TYPES = {"sdar": "sdar", "fast_dllm_qwen": "fast_dllm_v2", "dream": "dream",
                "llada": "llada"}


@dataclass(frozen=True)
class ModelConfig:
    family: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-6
    tie_word_embeddings: bool = False
    block_size: int = 0  # trained block of block-causal families; 0 for bidirectional ones
    mask_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    max_position_embeddings: int = 4096
    embedding_size: int | None = None  # LLaDA pads its embedding table beyond vocab_size
    rope_scaling: dict | None = None  # config.json rope_scaling (linear/llama3/yarn); engine.rope

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {sorted(FAMILIES)}, got {self.family!r}")
        for name in ("vocab_size", "hidden_size", "num_layers", "num_heads", "num_kv_heads",
                     "head_dim", "intermediate_size", "max_position_embeddings"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of "
                             f"num_kv_heads ({self.num_kv_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        if self.block_causal and self.block_size < 1:
            raise ValueError(f"family {self.family!r} is block-causal: block_size must be >= 1")
        object.__setattr__(self, "eos_token_ids", tuple(int(i) for i in self.eos_token_ids))
        if self.rope_scaling is not None:
            scaling = self.rope_scaling
            kind = scaling.get("rope_type") if isinstance(scaling, dict) else None
            if kind not in ROPE_TYPES or kind == "default":
                raise ValueError(f"rope_scaling must be None or a dict with rope_type in "
                                 f"{ROPE_TYPES[1:]}, got {self.rope_scaling!r}")
            if self.layout == "llada":
                raise ValueError("rope_scaling: LLaDA's config format has no rope scaling")

    @property
    def layout(self) -> str:
        return FAMILIES[self.family][0]

    @property
    def block_causal(self) -> bool:
        return FAMILIES[self.family][1]

    @property
    def logit_shift(self) -> bool:
        return FAMILIES[self.family][2]

    @property
    def qkv_bias(self) -> bool:
        return self.layout == "qwen2"

    @property
    def qk_norm(self) -> bool:
        return self.layout == "qwen3"

    @property
    def num_embeddings(self) -> int:
        return self.embedding_size or self.vocab_size

    # ------------------------------------------------------------------ HF config.json
    @classmethod
    def from_hf(cls, cfg: dict, source: str = "config.json") -> ModelConfig:
        """Build from a checkpoint's config.json dict; `source` names the file in errors."""
        family = None
        for arch in cfg.get("architectures") or []:
            family = family or _ARCHITECTURES.get(arch)
        family = family or _MODEL_TYPES.get(str(cfg.get("model_type", "")).lower())
        if family is None:
            raise ValueError(
                f"{source}: unknown architecture {cfg.get('architectures')!r} / model_type "
                f"{cfg.get('model_type')!r}; supported: {sorted(_ARCHITECTURES)}")

        def need(*keys):
            for key in keys:
                if key in cfg and cfg[key] is not None:
                    return cfg[key]
            raise ValueError(f"{source}: missing required field {' or '.join(keys)!r}")

        check_fields(cfg, family, source)  # refuses fields that change the math
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
        if family == "llada":  # absent keys take configuration_llada.py's defaults
            hidden, heads = llada_value(cfg, "d_model"), llada_value(cfg, "n_heads")
            mlp = llada_value(cfg, "mlp_hidden_size") or llada_value(cfg, "mlp_ratio") * hidden
            vocab, emb = llada_value(cfg, "vocab_size"), llada_value(cfg, "embedding_size")
            if emb is not None and emb < vocab:  # modeling_llada.py raises the same
                raise ValueError(f"{source}: embedding_size ({emb}) must be at least vocab_size "
                                 f"({vocab})" + ("" if "embedding_size" in cfg else
                                                 " (absent: configuration_llada.py default)"))
            return cls(
                family=family, vocab_size=vocab, hidden_size=hidden,
                num_layers=llada_value(cfg, "n_layers"), num_heads=heads,
                num_kv_heads=_llada_kv_heads(cfg, heads, source), head_dim=hidden // heads,
                intermediate_size=mlp, rope_theta=float(llada_value(cfg, "rope_theta")),
                rms_norm_eps=float(llada_value(cfg, "rms_norm_eps")),
                tie_word_embeddings=bool(llada_value(cfg, "weight_tying")),
                mask_token_id=cfg.get("mask_token_id"), eos_token_ids=eos_ids,
                max_position_embeddings=llada_value(cfg, "max_sequence_length"),
                embedding_size=None if emb == vocab else emb)
        hidden, heads = need("hidden_size"), need("num_attention_heads")
        if (family in ("fast_dllm_v2", "dream") and cfg.get("head_dim") is not None
                and cfg["head_dim"] * heads != hidden):  # their modelling code ignores head_dim
            raise ValueError(f"{source}: head_dim = {cfg['head_dim']} is not hidden_size / "
                             f"num_attention_heads, which {family}'s modelling code uses")
        if family in ("sdar", "fast_dllm_v2"):
            block = need("block_size", "bd_size")
        else:
            block = 0
        return cls(
            family=family, vocab_size=need("vocab_size"), hidden_size=hidden,
            num_layers=need("num_hidden_layers"), num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or hidden // heads,
            intermediate_size=need("intermediate_size"),
            rope_theta=float(_qwen_rope_theta(cfg)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            block_size=int(block), mask_token_id=cfg.get("mask_token_id"), eos_token_ids=eos_ids,
            max_position_embeddings=cfg.get("max_position_embeddings", 32768),
            rope_scaling=rope_scaling_of(cfg))

    def to_hf(self) -> dict:
        """A config.json in the family's own naming (inverse of from_hf)."""
        eos = list(self.eos_token_ids)
        common = {"vocab_size": self.vocab_size, "rope_theta": self.rope_theta,
                  "rms_norm_eps": self.rms_norm_eps, "mask_token_id": self.mask_token_id,
                  "eos_token_id": eos[0] if len(eos) == 1 else eos, "torch_dtype": "float32"}
        if self.family == "llada":
            return {"architectures": ["LLaDAModelLM"], "model_type": "llada", **common,
                    "d_model": self.hidden_size, "n_layers": self.num_layers,
                    "n_heads": self.num_heads, "n_kv_heads": self.num_kv_heads,
                    "mlp_hidden_size": self.intermediate_size,
                    "weight_tying": self.tie_word_embeddings,
                    "max_sequence_length": self.max_position_embeddings,
                    "embedding_size": self.embedding_size, "block_type": "llama",
                    **family_fields(self)}
        if self.layout == "qwen2" and self.head_dim * self.num_heads != self.hidden_size:
            raise ValueError(f"head_dim ({self.head_dim}) must be hidden_size / num_heads for "
                             f"{self.family!r}: its modelling code derives it so")
        arch, model_type = {
            "sdar": ("SDARForCausalLM", "sdar"),
            "fast_dllm_v2": ("Fast_dLLM_QwenForCausalLM", "Fast_dLLM_Qwen"),
            "dream": ("DreamModel", "Dream"),
        }[self.family]
        out = {"architectures": [arch], "model_type": model_type, **common,
               "hidden_size": self.hidden_size, "num_hidden_layers": self.num_layers,
               "num_attention_heads": self.num_heads, "num_key_value_heads": self.num_kv_heads,
               "head_dim": self.head_dim, "intermediate_size": self.intermediate_size,
               "tie_word_embeddings": self.tie_word_embeddings, "hidden_act": "silu",
               "max_position_embeddings": self.max_position_embeddings,
               "rope_scaling": self.rope_scaling, **family_fields(self)}
        if self.family == "sdar":
            out["block_size"] = self.block_size
        elif self.family == "fast_dllm_v2":
            out["bd_size"] = self.block_size
        return out

    def as_dict(self) -> dict:
        return asdict(self)


def _qwen_rope_theta(cfg: dict) -> float:
    """rope_theta at the top level (transformers 4) or inside rope_parameters (transformers 5)."""
    if cfg.get("rope_theta") is not None:
        return cfg["rope_theta"]
    params = cfg.get("rope_parameters")
    if isinstance(params, dict) and params.get("rope_theta") is not None:
        return params["rope_theta"]
    return 10000.0


def _llada_kv_heads(cfg: dict, heads: int, source: str) -> int:
    """configuration_llada.py's effective_n_kv_heads."""
    n_kv, mqa = llada_value(cfg, "n_kv_heads"), llada_value(cfg, "multi_query_attention")
    if n_kv is None:
        return 1 if mqa is True else heads
    if mqa is not None and n_kv != (1 if mqa else heads):
        raise ValueError(f"{source}: multi_query_attention ({mqa}) contradicts n_kv_heads ({n_kv})")
    return n_kv
