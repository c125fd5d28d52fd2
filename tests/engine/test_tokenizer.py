"""Chat template rendering and incremental detokenisation."""

import random

import pytest

from diffvoice.engine.testing import make_tokenizer
from diffvoice.engine.tokenizer import ChatTokenizer, Detokenizer


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    d = tmp_path_factory.mktemp("tok")
    make_tokenizer(d)
    return ChatTokenizer.from_dir(d)


def test_chat_template_renders_roles_and_generation_prompt(tok):
    text = tok.render([{"role": "system", "content": "Be brief."},
                       {"role": "user", "content": "Hi there"}])
    assert text == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi there"
                    "<|im_end|>\n<|im_start|>assistant\n")
    ids = tok.encode(text)
    assert tok.token_id("<|im_start|>") in ids and tok.token_id("<|im_end|>") in ids
    assert tok.decode(ids) == "system\nBe brief.\nuser\nHi there\nassistant\n"


def test_bad_messages_rejected(tok):
    with pytest.raises(ValueError, match=r"messages\[1\]"):
        tok.render([{"role": "user", "content": "x"}, {"content": "no role"}])


def test_detokenizer_deltas_rebuild_text_without_split_words_or_broken_utf8(tok):
    text = "Café naïve déjà vu — we open at 9:00 on Monday, ünïcödé € 12 Main Street."
    ids = tok.encode(text)
    rng = random.Random(0)
    for _ in range(20):
        det, out, i = Detokenizer(tok), [], 0
        while i < len(ids):
            n = rng.randint(1, 4)
            out.append(det.feed(ids[i:i + n]))
            i += n
        out.append(det.flush())
        assert "".join(out) == text
        assert not any("\ufffd" in delta for delta in out)
        # every non-final delta ends at a word boundary: the next character is whitespace
        joined = ""
        for delta in out[:-1]:
            joined += delta
            assert joined == "" or text[len(joined)] in " \n", (joined, text)


def test_invalid_utf8_bytes_never_reach_the_caller(tok):
    """A lone continuation byte (what random weights produce) is dropped, not sent as U+FFFD."""
    byte_level = tok.tokenizer.pre_tokenizer  # ByteLevel: byte 0x80 -> its alphabet symbol
    symbol = byte_level.pre_tokenize_str("\u00e9")[0][0][1]  # "é" = 0xC3 0x89 -> two symbols
    lone = tok.token_id(symbol)  # 0x89 alone is a continuation byte: invalid UTF-8
    assert lone is not None
    det = Detokenizer(tok)
    out = det.feed(tok.encode("Hello ") + [lone] + tok.encode(" there friend"))
    out += det.flush()
    assert "\ufffd" not in out and out.replace(" ", "") == "Hellotherefriend"
