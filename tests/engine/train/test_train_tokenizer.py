"""The receptionist tokenizer: byte-level round trip, special tokens, and the chat template as the
engine's own tokenizer loader renders it."""

import pytest
from transformers import PreTrainedTokenizerFast

from diffvoice.engine.tokenizer import ChatTokenizer
from diffvoice.engine.train.build_tokenizer import (
    EOS_TOKEN,
    MASK_TOKEN,
    SPECIAL_TOKENS,
    train_tokenizer,
)

CORPUS = [" what time do you open on friday?", "On Fridays we're open from 8 am to 3 pm.",
          " how much is a cleaning", "A cleaning is 95 dollars.", " hi there"] * 20


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("tok")
    train_tokenizer(CORPUS, out, vocab_size=320)
    return out


def test_text_round_trips_through_byte_level_bpe(tok_dir):
    tok = ChatTokenizer.from_dir(tok_dir)
    for text in ["On Fridays we're open from 8 am to 3 pm.", "Zürich — naïve café? 100%!",
                 "  two  spaces\tand a tab", "emoji 🦷 ok"]:
        assert tok.decode(tok.encode(text)) == text
    ids = [tok.token_id(t) for t in SPECIAL_TOKENS]
    assert None not in ids and len(set(ids)) == len(ids)
    assert tok.mask_token_id() == tok.token_id(MASK_TOKEN)
    assert tok.special["eos_token"] == EOS_TOKEN


def test_chat_template_keeps_the_previous_exchange_lowercases_users_drops_system(tok_dir):
    tok = ChatTokenizer.from_dir(tok_dir)
    messages = [{"role": "system", "content": "You are a pirate."},
                {"role": "user", "content": "Hello"},
                {"role": "assistant", "content": "Hi, how can I help?"},
                {"role": "user", "content": "  What time do you OPEN on Friday?  "}]
    assert tok.render(messages) == ("<|user|> hello<|end|><|assistant|>Hi, how can I help?<|end|>"
                                    "<|user|> what time do you open on friday?<|end|><|assistant|>")
    messages = messages[:1] + messages[3:]
    prompt = tok.render(messages, add_generation_prompt=True)
    assert prompt == "<|user|> what time do you open on friday?<|end|><|assistant|>"
    assert tok.render(messages, add_generation_prompt=False).endswith("<|end|>")
    ids = tok.encode(prompt)
    assert ids[0] == tok.token_id("<|user|>") and ids[-2:] == [tok.token_id(EOS_TOKEN),
                                                                tok.token_id("<|assistant|>")]
    assert tok.tokenizer.decode(ids, skip_special_tokens=False) == prompt
    assert tok.decode(ids) == " what time do you open on friday?"
    assert tok.render([{"role": "system", "content": "x"}]) == "<|assistant|>"


def test_transformers_reads_the_same_files(tok_dir):
    hf = PreTrainedTokenizerFast.from_pretrained(str(tok_dir))
    ours = ChatTokenizer.from_dir(tok_dir)
    messages = [{"role": "user", "content": "How much is a Cleaning?"}]
    assert hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == \
        ours.render(messages)
    assert hf.eos_token == EOS_TOKEN and hf.mask_token == MASK_TOKEN
    assert hf.encode("A cleaning is 95 dollars.", add_special_tokens=False) == \
        ours.encode("A cleaning is 95 dollars.")
