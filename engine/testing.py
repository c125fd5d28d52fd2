"""Random-weight checkpoints for tests and benchmarks, written in each family's real naming.

`make_random_checkpoint(dir, family=...)` trains a tiny byte-level BPE (tokenizers) on a built-in
text, writes tokenizer.json + tokenizer_config.json (ChatML template) and a random model through
engine.loader.save_checkpoint. Nothing is downloaded. `decode_in_this_thread(engine, *seqs)` decodes
prepared Sequences without the worker thread (tests and the speed driver).
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import save_checkpoint
from diffvoice.engine.model import DiffusionLM

CHATML_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")

CORPUS = """Hello, thanks for calling. How can I help you today?
We are open from nine in the morning until six in the evening, Monday to Friday.
The quick brown fox jumps over the lazy dog. Can you tell me the opening hours?
A haircut costs thirty dollars. We are at 12 Main Street, next to the bakery.
I'm sorry, I didn't catch that. Could you say it again? Goodbye and have a nice day!
Diffusion language models draft a whole block of tokens in a few parallel passes.
Numbers: 0 1 2 3 4 5 6 7 8 9 10 20 30 45 100. Café, naïve, déjà vu — ünïcödé €.
"""

FAMILY_MASK_TOKENS = {"llada": "<|mdm_mask|>", "dream": "<|mask|>", "sdar": "<|mask|>",
                      "fast_dllm_v2": "|<MASK>|"}


def make_tokenizer(out_dir: Path, mask_token: str = "<|mask|>", vocab_size: int = 400,
                   extra_specials: tuple[str, ...] = (), chat_template: str = CHATML_TEMPLATE,
                   eos_token: str = "<|im_end|>") -> Tokenizer:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", mask_token, *extra_specials]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(CORPUS.splitlines() * 4, trainer)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save(str(out_dir / "tokenizer.json"))
    (out_dir / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": chat_template, "eos_token": eos_token, "pad_token": "<|endoftext|>",
        "mask_token": mask_token, "bos_token": None}, indent=2))
    return tok


def random_config(family: str, vocab_size: int, mask_token_id: int, eos_ids: tuple[int, ...],
                  **overrides) -> ModelConfig:
    dims = dict(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                intermediate_size=128, rope_theta=10000.0, rms_norm_eps=1e-6,
                tie_word_embeddings=False, max_position_embeddings=2048)
    if family == "llada":
        dims.update(num_kv_heads=dims["num_heads"])  # LLaDA is plain multi-head attention
    block = {"sdar": 4, "fast_dllm_v2": 8}.get(family, 0)
    dims.update(block_size=block)
    dims.update(overrides)
    return ModelConfig(family=family, vocab_size=vocab_size, mask_token_id=mask_token_id,
                       eos_token_ids=eos_ids, **dims)


def make_random_checkpoint(out_dir: str | Path, family: str = "sdar", seed: int = 0,
                           dtype: str = "float32", shard_size: int | None = None,
                           init_std: float = 0.02, tokenizer_kwargs: dict | None = None,
                           config_eos: str = "<|im_end|>", **overrides) -> Path:
    """A loadable random-weight checkpoint (~100k params by default); returns its directory.

    A larger `init_std` gives peaked logits (fewer near-ties between slots, which float noise
    could otherwise break differently in two equivalent computations). `tokenizer_kwargs` go to
    make_tokenizer (extra special tokens, another chat template); `config_eos` is the token whose
    id config.json declares as eos_token_id."""
    out = Path(out_dir)
    mask_token = FAMILY_MASK_TOKENS[family]
    tok = make_tokenizer(out, mask_token, **(tokenizer_kwargs or {}))
    eos = tok.token_to_id(config_eos)
    cfg = random_config(family, tok.get_vocab_size(), tok.token_to_id(mask_token), (eos,),
                        **overrides)
    model = DiffusionLM(cfg)
    model.init_weights(std=init_std,
                       generator=torch.Generator().manual_seed(seed))
    save_checkpoint(model, out, tokenizer_dir=None, dtype=dtype, shard_size=shard_size)
    return out


def decode_in_this_thread(engine, *seqs) -> None:
    """Decode prepared Sequences (batched together) to their end with the engine's own scheduler
    and runner, in the calling thread (no worker thread, no event loop): what the speed driver
    calls "engine core", and how tests compare decoding paths pass for pass. Holds the engine's
    lock."""
    with engine._lock:
        for seq in seqs:
            engine.scheduler.add(seq)
        while any(seq.finish_reason is None for seq in seqs):
            rows, admitted = engine.scheduler.schedule()
            for s in admitted:
                engine.runner.admit(s)
            engine.scheduler.update(rows, engine.step_rows(rows))
        for seq in seqs:
            engine.runner.release(seq)
