"""Chat-template variables reach the template (Python API and engine.generate), and every family's
end-of-turn token stops an answer even when no config lists it (LLaDA's <|eot_id|>)."""

import asyncio

import pytest
import torch
from safetensors.torch import load_file, save_file

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.loader import read_config
from diffvoice.engine.testing import make_random_checkpoint

# A Qwen3-style template: enable_thinking=False pre-fills an empty think block; tools listed.
THINKING_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{% for t in tools %}{{ t['name'] }};{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")
# LLaDA-8B-Instruct's template (tests/assets/real_configs/LLaDA-8B-Instruct/tokenizer_config.json)
LLADA_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | "
    "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}"
    "{% endif %}{{ content }}{% endfor %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}")
HI = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def thinking_ckpt(tmp_path_factory):
    return make_random_checkpoint(tmp_path_factory.mktemp("think") / "m", family="sdar",
                                  tokenizer_kwargs={"chat_template": THINKING_TEMPLATE})


def test_template_kwargs_reach_the_template(thinking_ckpt):
    _, tok = read_config(thinking_ckpt)
    plain = tok.render(HI)
    assert plain.endswith("<|im_start|>assistant\n")
    no_think = tok.apply_chat_template(HI, tokenize=False, enable_thinking=False)
    assert no_think == plain + "<think>\n\n</think>\n\n"
    tools = [{"name": "check_availability"}, {"name": "book_appointment"}]
    assert tok.render(HI, tools=tools).startswith(
        "<|im_start|>system\ncheck_availability;book_appointment;<|im_end|>\n")
    assert tok.apply_chat_template(HI, enable_thinking=False) == tok.encode(no_think)


def test_engine_generate_passes_template_kwargs(thinking_ckpt):
    engine = Engine.from_pretrained(thinking_ckpt, EngineConfig(device="cpu", enforce_eager=True))
    try:
        params = SamplingParams(max_new_tokens=4, ignore_eos=True)

        async def prompt_tokens(**kwargs):
            last = None
            async for delta in engine.generate(HI, params, **kwargs):
                last = delta
            return last.prompt_tokens

        _, tok = read_config(thinking_ckpt)
        base = asyncio.run(prompt_tokens())
        off = asyncio.run(prompt_tokens(chat_template_kwargs={"enable_thinking": False}))
        assert base == len(tok.encode_chat(HI))
        assert off == len(tok.encode_chat(HI, enable_thinking=False)) > base
        with pytest.raises(ValueError, match="chat_template_kwargs"):
            engine.prepare(HI, params, chat_template_kwargs=["enable_thinking"])
        with pytest.raises(ValueError, match="may not set messages"):
            engine.prepare(HI, params, chat_template_kwargs={"messages": []})
    finally:
        engine.close()


def _always_emit(path, token_id):
    """Rewrite the weights so that every position's top logit is `token_id`: layers add nothing
    (o_proj, down_proj zero), embedding dimension 0 is a large constant, and only `token_id`'s
    output row reads it."""
    tensors = load_file(path / "model.safetensors")
    for name, t in tensors.items():
        if name.endswith(("o_proj.weight", "down_proj.weight", "attn_out.weight")) or (
                name.endswith("ff_out.weight") and ".blocks." in name):
            tensors[name] = torch.zeros_like(t)
    embed = next(n for n in tensors if n.endswith(("embed_tokens.weight", "wte.weight")))
    tensors[embed][:, 0] = 10.0
    head = next(n for n in tensors if n in ("lm_head.weight", "model.transformer.ff_out.weight"))
    tensors[head] = torch.zeros_like(tensors[head])
    tensors[head][token_id, 0] = 5.0
    save_file(tensors, str(path / "model.safetensors"))


@pytest.mark.parametrize("family,template,turn_end,specials", [
    ("llada", LLADA_TEMPLATE, "<|eot_id|>",
     ("<|startoftext|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")),
    ("dream", None, "<|im_end|>", ()),  # Dream's configs list only <|endoftext|>
])
def test_template_end_of_turn_token_stops_the_answer(tmp_path, family, template, turn_end,
                                                     specials):
    kwargs = {"extra_specials": specials, "eos_token": "<|endoftext|>"}
    if template:
        kwargs["chat_template"] = template
    path = make_random_checkpoint(tmp_path / "m", family=family, tokenizer_kwargs=kwargs,
                                  config_eos="<|endoftext|>")
    cfg, tok = read_config(path)
    eot = tok.token_id(turn_end)
    assert eot in cfg.eos_token_ids and tok.token_id("<|endoftext|>") in cfg.eos_token_ids
    _always_emit(path, eot)
    engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True))
    try:
        async def answer(params):
            text, last = "", None
            async for delta in engine.generate(HI, params):
                text, last = text + delta.text, delta
            return text, last

        text, last = asyncio.run(answer(SamplingParams(max_new_tokens=16)))
        assert (text, last.finish_reason, last.completion_tokens) == ("", "stop", 0)
        _, control = asyncio.run(answer(SamplingParams(max_new_tokens=16, ignore_eos=True)))
        assert control.finish_reason == "length" and control.completion_tokens == 16
    finally:
        engine.close()


def test_chat_template_file_takes_priority_over_the_config_entry(tmp_path):
    """As transformers' from_pretrained: chat_template.jinja beats tokenizer_config.json's."""
    path = make_random_checkpoint(tmp_path / "m", family="sdar")
    (path / "chat_template.jinja").write_text("{{ messages[0]['content'] }}!")
    _, tok = read_config(path)
    assert tok.render(HI) == "Hi!"
