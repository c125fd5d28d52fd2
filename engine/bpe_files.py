"""A `tokenizers.Tokenizer` built from vocab.json + merges.txt + added tokens, for checkpoints that
ship no tokenizer.json (Fast_dLLM_v2_7B, Dream-v0-Instruct-7B ship the slow tokenizer's files).

`tokenizer_from_bpe_files(dir, tokenizer_config)` rebuilds the byte-level BPE the way transformers'
Qwen2Tokenizer does (NFC normaliser, Qwen's pre-tokenising regex, ByteLevel without a prefix space,
ByteLevel decoder) and registers the added tokens with the ids and flags the checkpoint declares:
tokenizer_config.json's `added_tokens_decoder` first, then added_tokens.json, then any special token
(eos/pad/bos/unk/mask/additional) still missing. Only the Qwen2 tokenizer class (and Dream's copy of
it) is rebuilt; another `tokenizer_class` without a tokenizer.json raises ValueError naming it.
Knows nothing about chat templates or models.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers
from tokenizers.models import BPE

# transformers models/qwen2/tokenization_qwen2.py (same string in Dream's tokenization_dream.py)
QWEN2_PRETOKENIZE_REGEX = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"""
                           r""" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
QWEN2_CLASSES = ("Qwen2Tokenizer", "Qwen2TokenizerFast", "DreamTokenizer")
SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "mask_token")


def _content(value) -> str | None:
    return value.get("content") if isinstance(value, dict) else value


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def added_tokens(path: Path, cfg: dict) -> list[tuple[int | None, AddedToken]]:
    """(declared id or None, AddedToken) for every added token the checkpoint declares."""
    out: dict[str, tuple[int | None, AddedToken]] = {}
    for tid, spec in (cfg.get("added_tokens_decoder") or {}).items():
        out[spec["content"]] = (int(tid), AddedToken(
            spec["content"], single_word=spec.get("single_word", False),
            lstrip=spec.get("lstrip", False), rstrip=spec.get("rstrip", False),
            normalized=spec.get("normalized", False), special=spec.get("special", True)))
    special_map = _read_json(path / "special_tokens_map.json")
    specials = {_content(cfg.get(k)) for k in SPECIAL_KEYS} | {
        _content(special_map.get(k)) for k in SPECIAL_KEYS}
    for key in ("additional_special_tokens",):
        for src in (cfg, special_map):
            specials |= {_content(t) for t in src.get(key) or []}
    specials.discard(None)
    for content, tid in _read_json(path / "added_tokens.json").items():
        if content not in out:
            out[content] = (int(tid), AddedToken(content, normalized=False,
                                                 special=content in specials))
    for content in sorted(specials - set(out)):
        out[content] = (None, AddedToken(content, normalized=False, special=True))
    return list(out.values())


def tokenizer_from_bpe_files(path: str | Path, cfg: dict) -> Tokenizer:
    """Build the tokenizer of checkpoint directory `path` (tokenizer_config.json dict `cfg`)."""
    path = Path(path)
    vocab_file, merges_file = path / "vocab.json", path / "merges.txt"
    for f in (vocab_file, merges_file):
        if not f.is_file():
            raise FileNotFoundError(f"{path / 'tokenizer.json'}: missing, and so is {f.name} "
                                    f"(the engine needs tokenizer.json or vocab.json + merges.txt)")
    cls = cfg.get("tokenizer_class")
    if cls is not None and cls not in QWEN2_CLASSES:
        raise ValueError(f"{path / 'tokenizer_config.json'}: tokenizer_class {cls!r} cannot be "
                         f"rebuilt from vocab.json + merges.txt (supported: {QWEN2_CLASSES}); "
                         f"add the checkpoint's tokenizer.json")
    vocab = json.loads(vocab_file.read_text())
    merges = [tuple(line.split(" ")) for line in merges_file.read_text().splitlines()
              if line and not line.startswith("#version")]
    declared = added_tokens(path, cfg)
    for tid, token in declared:
        have = vocab.get(token.content)
        if tid is not None and have is not None and have != tid:
            raise ValueError(f"{path}: added token {token.content!r} declared as id {tid} but "
                             f"vocab.json gives it {have}")
        if tid is not None:
            vocab[token.content] = tid
    tok = Tokenizer(BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None,
                        continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False,
                        byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=bool(cfg.get("add_prefix_space", False)),
                                 use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for _, token in sorted(declared, key=lambda d: (d[0] is None, d[0] or 0)):
        (tok.add_special_tokens if token.special else tok.add_tokens)([token])
    return tok
