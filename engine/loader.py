"""Load and save HF-format checkpoint directories.

A directory holds config.json, model.safetensors or sharded model-*.safetensors with
model.safetensors.index.json, tokenizer.json and tokenizer_config.json (chat template). Each
family's tensor names are mapped onto engine.model's internal names; a missing file, a missing or
unexpected tensor, or a shape mismatch raises an error naming the file and the tensor.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.params import DECODINGS
from diffvoice.engine.tokenizer import ChatTokenizer

log = logging.getLogger("diffvoice.loader")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "chat_template.jinja", "generation_config.json", "vocab.json", "merges.txt",
                   "added_tokens.json")


def checkpoint_names(cfg: ModelConfig) -> dict[str, str]:
    """internal parameter name -> the family's tensor name in the checkpoint."""
    names: dict[str, str] = {}
    if cfg.layout == "llada":
        names["embed.weight"] = "model.transformer.wte.weight"
        names["norm.weight"] = "model.transformer.ln_f.weight"
        if not cfg.tie_word_embeddings:
            names["lm_head.weight"] = "model.transformer.ff_out.weight"
        per_layer = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj",
                     "o_proj": "attn_out", "gate_proj": "ff_proj", "up_proj": "up_proj",
                     "down_proj": "ff_out", "input_norm": "attn_norm", "post_norm": "ff_norm"}
        for i in range(cfg.num_layers):
            for ours, theirs in per_layer.items():
                names[f"layers.{i}.{ours}.weight"] = f"model.transformer.blocks.{i}.{theirs}.weight"
        return names
    names["embed.weight"] = "model.embed_tokens.weight"
    names["norm.weight"] = "model.norm.weight"
    if not cfg.tie_word_embeddings:
        names["lm_head.weight"] = "lm_head.weight"
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}"
        for proj in ("q_proj", "k_proj", "v_proj", "o_proj"):
            names[f"layers.{i}.{proj}.weight"] = f"{p}.self_attn.{proj}.weight"
        if cfg.qkv_bias:
            for proj in ("q_proj", "k_proj", "v_proj"):
                names[f"layers.{i}.{proj}.bias"] = f"{p}.self_attn.{proj}.bias"
        if cfg.qk_norm:
            for norm in ("q_norm", "k_norm"):
                names[f"layers.{i}.{norm}.weight"] = f"{p}.self_attn.{norm}.weight"
        for proj in ("gate_proj", "up_proj", "down_proj"):
            names[f"layers.{i}.{proj}.weight"] = f"{p}.mlp.{proj}.weight"
        names[f"layers.{i}.input_norm.weight"] = f"{p}.input_layernorm.weight"
        names[f"layers.{i}.post_norm.weight"] = f"{p}.post_attention_layernorm.weight"
    return names


def _tensor_files(path: Path) -> dict[str, Path]:
    """checkpoint tensor name -> file holding it."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index}: no 'weight_map'")
        files = {name: path / fname for name, fname in weight_map.items()}
        for f in set(files.values()):
            if not f.is_file():
                raise FileNotFoundError(f"{f}: listed in {index.name} but missing")
        return files
    single = path / "model.safetensors"
    if not single.is_file():
        raise FileNotFoundError(f"{single}: missing (no model.safetensors nor "
                                f"model.safetensors.index.json in {path})")
    with safe_open(str(single), framework="pt") as f:
        return {name: single for name in f.keys()}  # noqa: SIM118 - safe_open has no __iter__


@dataclass
class LoadedModel:
    model: DiffusionLM
    tokenizer: ChatTokenizer
    config: ModelConfig
    path: Path
    name: str
    # SamplingParams(decoding=None) means this: generation_config.json's "decoding", where the
    # checkpoint names one (read_default_decoding), else the family's authors' decoding
    default_decoding: str = "reference"


def read_default_decoding(path: str | Path) -> str:
    """The decoding a checkpoint asks for by default: generation_config.json's "decoding"
    ("reference" / "fast"; diffvoice's receptionists write "fast"), else "reference"."""
    gen_file = Path(path) / "generation_config.json"
    if not gen_file.is_file():
        return "reference"
    value = json.loads(gen_file.read_text()).get("decoding", "reference")
    if value not in DECODINGS:
        raise ValueError(f"{gen_file}: decoding must be one of {DECODINGS}, got {value!r}")
    return value


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":  # fp32 on CPU: bf16 is ~5x slower on CPUs without native bf16
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be auto or one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def read_config(path: str | Path) -> tuple[ModelConfig, ChatTokenizer]:
    """config.json + tokenizer files -> ModelConfig with mask/EOS ids filled from the files."""
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: not a checkpoint directory")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{cfg_file}: missing")
    raw = json.loads(cfg_file.read_text())
    cfg = ModelConfig.from_hf(raw, source=str(cfg_file))
    tokenizer = ChatTokenizer.from_dir(path)
    mask_id = cfg.mask_token_id if cfg.mask_token_id is not None else tokenizer.mask_token_id()
    if mask_id is None:
        raise ValueError(f"{cfg_file}: no mask_token_id, and tokenizer.json has no mask token "
                         f"(looked for the tokenizer_config mask_token and common names)")
    eos = list(cfg.eos_token_ids)
    gen_file = path / "generation_config.json"
    if gen_file.is_file():
        gen_eos = json.loads(gen_file.read_text()).get("eos_token_id")
        eos += gen_eos if isinstance(gen_eos, list) else ([gen_eos] if gen_eos is not None else [])
    tok_eos = tokenizer.token_id(tokenizer.special.get("eos_token"))
    if tok_eos is not None:
        eos.append(tok_eos)
    eos += tokenizer.end_of_turn_ids()  # e.g. LLaDA's <|eot_id|>, absent from its configs
    eos = tuple(dict.fromkeys(int(e) for e in eos))
    if not eos:
        raise ValueError(f"{cfg_file}: no eos_token_id here, in generation_config.json or as the "
                         f"tokenizer_config eos_token")
    return replace(cfg, mask_token_id=int(mask_id), eos_token_ids=eos), tokenizer


def _head_name(cfg: ModelConfig) -> str:
    return "model.transformer.ff_out.weight" if cfg.layout == "llada" else "lm_head.weight"


def _resolve_tied_head(cfg: ModelConfig, files: dict[str, Path]):
    """A tied checkpoint that also stores the output head, as transformers (5.x) treats it: a head
    equal to the embedding is dropped (the two stay tied); a different one is used, untied, with a
    warning. Returns the (possibly untied) config and the tensor files to load."""
    head = _head_name(cfg)
    if not cfg.tie_word_embeddings or head not in files:
        return cfg, files
    embed = checkpoint_names(replace(cfg, tie_word_embeddings=False))["embed.weight"]
    if embed not in files:
        return cfg, files  # reported as a missing tensor by the caller
    with safe_open(str(files[head]), framework="pt") as f:
        head_t = f.get_tensor(head)
    with safe_open(str(files[embed]), framework="pt") as f:
        embed_t = f.get_tensor(embed)
    if head_t.shape == embed_t.shape and torch.equal(head_t, embed_t):
        return cfg, {n: f for n, f in files.items() if n != head}
    log.warning("%s: config ties the output head to the embedding but %r holds different values; "
                "using the stored head untied (as transformers does)", files[head], head)
    return replace(cfg, tie_word_embeddings=False), files


def load_checkpoint(path: str | Path, dtype: str = "auto", device: str = "cpu") -> LoadedModel:
    path = Path(path)
    dev = torch.device(device)
    cfg, tokenizer = read_config(path)
    torch_dtype = resolve_dtype(dtype, dev)
    files = _tensor_files(path)
    cfg, files = _resolve_tied_head(cfg, files)
    with torch.device("meta"):
        model = DiffusionLM(cfg)
    names = checkpoint_names(cfg)
    expected = {theirs: ours for ours, theirs in names.items()}
    unexpected = [n for n in files if n not in expected and not n.endswith(IGNORED_SUFFIXES)]
    if unexpected:
        some = ", ".join(sorted(unexpected)[:5])
        raise ValueError(f"{files[unexpected[0]]}: unexpected tensors for family "
                         f"{cfg.family!r}: {some}{' ...' if len(unexpected) > 5 else ''}")
    params = dict(model.named_parameters())
    state: dict[str, torch.Tensor] = {}
    handles: dict[Path, object] = {}
    try:
        for theirs, ours in expected.items():
            if theirs not in files:
                raise ValueError(f"{path}: missing tensor {theirs!r} "
                                 f"(expected shape {tuple(params[ours].shape)})")
            f = files[theirs]
            if f not in handles:
                handles[f] = safe_open(str(f), framework="pt", device="cpu")
            tensor = handles[f].get_tensor(theirs)
            if tuple(tensor.shape) != tuple(params[ours].shape):
                raise ValueError(f"{f}: tensor {theirs!r} has shape {tuple(tensor.shape)}, "
                                 f"expected {tuple(params[ours].shape)} from config.json")
            state[ours] = tensor.to(device=dev, dtype=torch_dtype)
    finally:
        handles.clear()
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.embed.weight
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=tokenizer, config=cfg, path=path, name=path.name,
                       default_decoding=read_default_decoding(path))


def save_checkpoint(model: DiffusionLM, out_dir: str | Path,
                    tokenizer_dir: str | Path | None = None, dtype: str = "float32",
                    shard_size: int | None = None) -> Path:
    """Write config.json + safetensors in the family's naming; copy tokenizer files if given.

    shard_size (tensors per shard) writes model-0000N-of-0000M.safetensors + index json.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = model.config
    hf = cfg.to_hf()
    hf["torch_dtype"] = dtype
    (out / "config.json").write_text(json.dumps(hf, indent=2) + "\n")
    params = dict(model.named_parameters())
    tensors = {theirs: params[ours].detach().to("cpu", DTYPES[dtype]).contiguous()
               for ours, theirs in checkpoint_names(cfg).items()}
    if shard_size:
        items = sorted(tensors.items())
        shards = [items[i:i + shard_size] for i in range(0, len(items), shard_size)]
        weight_map = {}
        for n, shard in enumerate(shards, 1):
            fname = f"model-{n:05d}-of-{len(shards):05d}.safetensors"
            save_file(dict(shard), str(out / fname), metadata={"format": "pt"})
            weight_map.update({name: fname for name, _ in shard})
        (out / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2) + "\n")
    else:
        save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    _umask_mode(out.glob("*.safetensors"))
    if tokenizer_dir is not None:
        for name in TOKENIZER_FILES:
            src = Path(tokenizer_dir) / name
            if src.is_file() and src.resolve() != (out / name).resolve():
                shutil.copy(src, out / name)
    gen_file = out / "generation_config.json"
    if not gen_file.is_file() and cfg.eos_token_ids:  # Dream's from_pretrained requires one
        eos = list(cfg.eos_token_ids)
        gen_file.write_text(json.dumps({"_from_model_config": True,
                                        "eos_token_id": eos[0] if len(eos) == 1 else eos,
                                        "pad_token_id": eos[0]}, indent=2) + "\n")
    return out


def _umask_mode(paths) -> None:
    """safetensors writes through a private temp file (mode 0600); give the weights the mode any
    other file written here gets (0666 minus the umask), so a shared checkpoint is readable."""
    umask = os.umask(0)
    os.umask(umask)
    for path in paths:
        os.chmod(path, 0o666 & ~umask)
