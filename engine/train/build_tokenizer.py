"""Train the receptionist's byte-level BPE and write tokenizer.json + tokenizer_config.json.

The chat template renders the current user turn and the previous exchange (HISTORY_EXCHANGES = 1:
the previous user message and every assistant reply, tool call and tool result after it), user
text lower-cased and trimmed; system prompts are NOT rendered (a 3.6M-parameter model cannot follow
instructions; its knowledge lives in its weights). A single question renders as
    "<|user|> what time do you open on friday?<|end|><|assistant|>"
a follow-up as
    "<|user|> how much is a crown?<|end|><|assistant|>A crown is 900 dollars.<|end|>"
    "<|user|> and how long does it take?<|end|><|assistant|>"
and a tool round trip as
    "...<|assistant|><tool_call>\n{...}\n</tool_call><|end|><|tool|> {"booked": true}<|end|>"
    "<|assistant|>"
The reply follows the assistant tag without a leading space and ends with <|end|> (EOS).
Knows nothing about models or training.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

EOS_TOKEN = "<|end|>"
MASK_TOKEN = "<|mask|>"
SPECIAL_TOKENS = (EOS_TOKEN, MASK_TOKEN, "<|user|>", "<|assistant|>", "<|system|>", "<|tool|>")

# Renders the previous exchange (the earlier user message and everything after it: assistant
# replies, tool calls and tool results) and the current turn; system messages are not rendered
# (HISTORY_EXCHANGES / SYSTEM_PROMPT below are written into tokenizer_config.json so servers can
# say so). User text is lower-cased and trimmed; an assistant tool call is rendered in the
# Hermes/Qwen2.5 wire format (arguments: the OpenAI JSON string as given).
HISTORY_EXCHANGES = 1
SYSTEM_PROMPT = "ignored"
CHAT_TEMPLATE = (
    "{%- set ns = namespace(last=-1, prev=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}"
    "{%- set ns.prev = ns.last -%}{%- set ns.last = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- set start = ns.prev if ns.prev >= 0 else (ns.last if ns.last >= 0 else 0) -%}"
    "{%- for m in messages[start:] -%}"
    "{%- if m['role'] == 'user' -%}<|user|> {{ (m['content'] or '') | lower | trim }}<|end|>"
    "{%- elif m['role'] == 'assistant' -%}<|assistant|>{{ (m['content'] or '') | trim }}"
    "{%- for tc in (m['tool_calls'] or []) -%}"
    "{%- set fn = tc['function'] if tc['function'] is defined else tc -%}"
    "{%- set args = fn['arguments'] -%}"
    "<tool_call>\n{\"name\": \"{{ fn['name'] }}\", \"arguments\": "
    "{{ args if args is string else (args | tojson) }}}\n</tool_call>"
    "{%- endfor -%}<|end|>"
    "{%- elif m['role'] == 'tool' -%}<|tool|> {{ (m['content'] or '') | trim }}<|end|>"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}")
# one token each (not special: a decoded reply keeps them), so a call is decided in one slot and
# its JSON skeleton is short. Pieces end where JSON allows whitespace (after '{' and ', ') or at
# a string's opening quote, so a value is always followed by '", ' or '"}}'.
TOOL_TOKENS = ("<tool_call>", "</tool_call>", '{"name": "', '", "arguments": {', '", ',
               '"}}', '"service": "', '"day": "', '"time": "', '"name": "', '"time": null}}',
               "check_availability", "book_appointment", "cancel_appointment")


def _write_config(tok: Tokenizer, out: Path) -> None:
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
        "receptionist": {"history_exchanges": HISTORY_EXCHANGES, "system_prompt": SYSTEM_PROMPT,
                         "tools": "built in: agent/tool_schemas.py"},
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")


def extend_tokenizer(src_dir: str | Path, out_dir: str | Path) -> Tokenizer:
    """An earlier receptionist's BPE with this version's extra tokens appended (old ids kept),
    and this version's chat template: for warm-starting from that model."""
    tok = Tokenizer.from_file(str(Path(src_dir) / "tokenizer.json"))
    missing = [t for t in SPECIAL_TOKENS if tok.token_to_id(t) is None]
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in missing])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS
                    if tok.token_to_id(t) is None])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    _write_config(tok, out)
    return tok


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
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    _write_config(tok, out)
    return tok
