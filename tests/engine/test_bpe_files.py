"""A checkpoint without tokenizer.json: the tokenizer rebuilt from vocab.json + merges.txt + added
tokens encodes and decodes random text exactly as transformers' Qwen2Tokenizer built from the same
files (and as the tokenizer.json that `tokenizers` would have written)."""

import json
import random

import pytest
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

from diffvoice.engine.bpe_files import QWEN2_PRETOKENIZE_REGEX, tokenizer_from_bpe_files
from diffvoice.engine.testing import CHATML_TEMPLATE, CORPUS
from diffvoice.engine.tokenizer import ChatTokenizer

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PLAIN_ADDED = ["<tool_call>", "</tool_call>"]  # added but not special (Qwen2.5's flags)


def write_slow_files(out, mask="|<MASK>|", with_decoder=True):
    """vocab.json + merges.txt of a small Qwen-style BPE, the added tokens in tokenizer_config's
    added_tokens_decoder (ids after the vocabulary, as in Qwen2.5) or in added_tokens.json."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PRETOKENIZE_REGEX), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    bpe.train_from_iterator(CORPUS.splitlines() * 3, trainers.BpeTrainer(
        vocab_size=500, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    out.mkdir(parents=True, exist_ok=True)
    bpe.model.save(str(out))
    n = bpe.get_vocab_size()
    added = [(t, True) for t in SPECIALS] + [(t, False) for t in PLAIN_ADDED] + [(mask, True)]
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "chat_template": CHATML_TEMPLATE,
           "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "bos_token": None,
           "additional_special_tokens": [mask], "errors": "replace", "unk_token": None,
           "add_prefix_space": False}
    if with_decoder:
        cfg["added_tokens_decoder"] = {
            str(n + i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": special}
            for i, (t, special) in enumerate(added)}
    else:
        (out / "added_tokens.json").write_text(json.dumps({t: n + i for i, (t, _) in
                                                           enumerate(added)}))
    (out / "tokenizer_config.json").write_text(json.dumps(cfg))
    return n


def random_texts(count, seed=0):
    rng = random.Random(seed)
    pieces = ["Hello", " there", "\n", "\n\n", "  ", "\t", "42", "2026", "Café", "naïve", "—",
              "€", "日本語", "I'm", "you'll", "DON'T", "<|im_start|>", "<|im_end|>", "<tool_call>",
              "|<MASK>|", "<|endoftext|>", '{"a": 1}', "e\u0301", "ﬁ", "?!", "   \n ", "😀"]
    out = []
    for _ in range(count):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 25)))
        text += "".join(chr(rng.choice([rng.randint(32, 126), rng.randint(0xA0, 0x24F)]))
                        for _ in range(rng.randint(0, 15)))
        out.append(text)
    return out


@pytest.mark.parametrize("with_decoder", [True, False])
def test_rebuilt_tokenizer_matches_transformers_qwen2(tmp_path, with_decoder):
    transformers = pytest.importorskip("transformers")
    n = write_slow_files(tmp_path, with_decoder=with_decoder)
    ours = ChatTokenizer.from_dir(tmp_path)  # no tokenizer.json here
    assert not (tmp_path / "tokenizer.json").exists()
    assert ours.token_id("<|im_end|>") == n + 2 and ours.mask_token_id() == n + 5
    texts = random_texts(300)
    if with_decoder:  # transformers 5 reads added_tokens_decoder (not added_tokens.json)
        ref = transformers.Qwen2Tokenizer.from_pretrained(str(tmp_path))
        for text in texts:
            assert ours.encode(text) == ref.encode(text, add_special_tokens=False), text
            ids = ours.encode(text)
            assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), text
    # the added tokens are single ids wherever they appear, special or not
    ids = ours.encode("a<tool_call>b<|im_end|>")
    assert n + 3 in ids and n + 2 in ids
    assert ours.decode(ids) == "a<tool_call>b"  # special tokens are skipped, plain added kept


def test_rebuilt_tokenizer_equals_its_saved_tokenizer_json(tmp_path):
    write_slow_files(tmp_path / "slow")
    cfg = json.loads((tmp_path / "slow" / "tokenizer_config.json").read_text())
    rebuilt = tokenizer_from_bpe_files(tmp_path / "slow", cfg)
    rebuilt.save(str(tmp_path / "tokenizer.json"))
    reloaded = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    for text in random_texts(100, seed=1):
        assert rebuilt.encode(text).ids == reloaded.encode(text).ids


def test_declared_id_that_contradicts_vocab_is_refused(tmp_path):
    write_slow_files(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    vocab = json.loads((tmp_path / "vocab.json").read_text())
    cfg["added_tokens_decoder"]["7"] = {"content": next(iter(vocab)), "special": True}
    with pytest.raises(ValueError, match="declared as id 7"):
        tokenizer_from_bpe_files(tmp_path, cfg)


def test_unknown_tokenizer_class_and_missing_files_are_named(tmp_path):
    write_slow_files(tmp_path)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    with pytest.raises(ValueError, match="tokenizer_class 'LlamaTokenizer'"):
        tokenizer_from_bpe_files(tmp_path, {**cfg, "tokenizer_class": "LlamaTokenizer"})
    (tmp_path / "merges.txt").unlink()
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.json: missing, and so is merges\.txt"):
        ChatTokenizer.from_dir(tmp_path)
