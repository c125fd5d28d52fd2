"""Train the receptionist's byte-level BPE and write tokenizer.json + tokenizer_config.json.

The chat template keeps only the LATEST user message, lower-cased and trimmed, and ignores system
prompts and earlier turns: the tiny model is a single-turn FAQ answerer whose knowledge lives in
its weights, and every prompt it sees at run time then has exactly the training format:
    "<|user|> what time do you open on friday?<|end|><|assistant|>"
The reply follows the assistant tag without a leading space and ends with <|end|> (EOS).
Knows nothing about models or training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

EOS_TOKEN = "<|end|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, MASK_TOKEN, "<|user|>", "<|assistant|>", "<|system|>")

CHAT_TEMPLATE = (
    "{% set users = messages | selectattr('role', 'equalto', 'user') | list %}"
    "<|user|> {{ (users[-1]['content'] if users else '') | lower | trim }}<|end|>"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def train_tokenizer(texts: Iterable[str], out_dir: str | Path, vocab_size: int = 2048,
                    min_frequency: int = 2) -> Tokenizer:
    """Fit a byte-level BPE on `texts`, save it and its config (chat template) in out_dir."""
    if vocab_size < 300:
        raise ValueError(f"vocab_size must be >= 300 (256 bytes + specials + merges), "
                         f"got {vocab_size}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=min_frequency, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    added = {str(tok.token_to_id(t)): {"content": t, "lstrip": False, "rstrip": False,
                                       "normalized": False, "single_word": False, "special": True}
             for t in SPECIAL_TOKENS}
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": EOS_TOKEN,
        "mask_token": MASK_TOKEN,
        "unk_token": None,
        "additional_special_tokens": list(SPECIAL_TOKENS[2:]),
        "added_tokens_decoder": added,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 1024,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return tok
