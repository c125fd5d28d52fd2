"""The engine benchmarks' workload: model shapes with random weights and the chats they answer
(`diffvoice bench engine`, `latency_bench.engine_profile`, the docs' measurement scripts).

    loaded = random_model("tiny-10m", device, dtype, seed, tokenizer_dir)   # PRESETS' shapes
    chats = prompt_messages(loaded.tokenizer, n, context)   # n different chats, ~context tokens

Nothing is downloaded: the tokenizer is the test fixture's (engine.testing.make_tokenizer), the
prompts its corpus. Knows nothing about voice.
"""

from __future__ import annotations

from pathlib import Path

import torch

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import LoadedModel
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.testing import CORPUS, make_tokenizer
from diffvoice.engine.tokenizer import ChatTokenizer

PRESETS = {
    # ~10M parameters, block-causal (SDAR layout), the CPU benchmark's default
    "tiny-10m": dict(family="sdar", vocab_size=16384, hidden_size=256, num_layers=8, num_heads=4,
                     num_kv_heads=2, head_dim=64, intermediate_size=768, block_size=8,
                     tie_word_embeddings=True),
    # the shape of Qwen2.5-1.5B as Fast-dLLM v2 uses it (block-causal, 32-token blocks)
    "qwen2.5-1.5b": dict(family="fast_dllm_v2", vocab_size=151936, hidden_size=1536,
                         num_layers=28, num_heads=12, num_kv_heads=2, head_dim=128,
                         intermediate_size=8960, block_size=32, tie_word_embeddings=True,
                         rope_theta=1000000.0),
}

PROMPTS = [line for line in CORPUS.splitlines() if line.strip()]



def random_model(preset: str, device: torch.device, dtype: torch.dtype, seed: int,
                 tokenizer_dir: Path) -> LoadedModel:
    tok = make_tokenizer(tokenizer_dir)
    dims = dict(PRESETS[preset])
    family = dims.pop("family")
    cfg = ModelConfig(family=family, mask_token_id=tok.token_to_id("<|mask|>"),
                      eos_token_ids=(tok.token_to_id("<|im_end|>"),),
                      max_position_embeddings=8192, **dims)
    torch.manual_seed(seed)
    with torch.device(device):
        model = DiffusionLM(cfg)
    model.init_weights(std=0.02)
    model.to(dtype).eval().requires_grad_(False)
    return LoadedModel(model, ChatTokenizer.from_dir(tokenizer_dir), cfg, tokenizer_dir, preset)


def prompt_messages(tokenizer: ChatTokenizer, n: int, context: int | None,
                    questions: list[str] | None = None) -> list[list[dict]]:
    """n different chats; with `context`, each is padded with earlier turns to ~context tokens."""
    chats = []
    for i in range(n):
        if questions:
            messages = [{"role": "user", "content": questions[i % len(questions)]}]
        else:
            messages = [{"role": "user", "content": f"{PROMPTS[i % len(PROMPTS)]} ({i})"}]
        if context:
            history, k = [], i
            while len(tokenizer.encode_chat(history + messages)) < context:
                history += [{"role": "user", "content": PROMPTS[k % len(PROMPTS)]},
                            {"role": "assistant", "content": PROMPTS[(k + 3) % len(PROMPTS)]}]
                k += 1
            messages = history + messages
        chats.append(messages)
    return chats
