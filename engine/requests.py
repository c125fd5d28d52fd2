"""Turning one request into a Sequence: validation, chat template, tokens, the family's decoding
rules and, for tool calls / response_format, the answer's skeleton. Pure host work; the engine
runs it on its worker thread (short prompts) or on a thread of its own (long ones)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import jinja2

from diffvoice.engine.constrained import build_plan
from diffvoice.engine.constrained.limits import Budget
from diffvoice.engine.decoding import resolve
from diffvoice.engine.params import SamplingParams
from diffvoice.engine.sequence import Sequence

if TYPE_CHECKING:
    from diffvoice.engine.engine import Engine


# what one message costs beyond its strings: the template's framing of it, and the per-message
# work (rendering, the agent's rules) that 8,000 one-character messages used to get for free
MESSAGE_CHARS = 32


def prompt_chars(messages) -> int:
    """What a request's messages cost, in characters (the max_prompt_chars measure): every
    string in every message, keys and values at any depth (content and its parts, names,
    tool_calls' ids, names and arguments, tool_call_id), plus MESSAGE_CHARS per message. One
    pass over what the request holds, no copy; a raw prompt (str) is its length."""
    if isinstance(messages, str):
        return len(messages)
    if not isinstance(messages, list | tuple):
        return 0
    total = MESSAGE_CHARS * len(messages)
    stack = list(messages)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            total += len(value)
        elif isinstance(value, dict):
            for key, item in value.items():
                total += len(key) if isinstance(key, str) else 0
                stack.append(item)
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif value is not None:
            total += 8  # a number or a bool
    return total


# names a chat template already has (Jinja's globals and the ones transformers adds): a
# chat_template_kwargs entry under one of them would replace it and break the template
TEMPLATE_NAMES = frozenset({"messages", "add_generation_prompt", "namespace", "range", "dict",
                            "lipsum", "cycler", "joiner", "raise_exception", "strftime_now",
                            "bos_token", "eos_token", "pad_token", "unk_token", "loop"})
MAX_TEMPLATE_KWARGS_CHARS = 16384


def needs_compile(params: SamplingParams) -> bool:
    """A request whose preparation compiles a schema (tools / response_format): work that
    grows with what the request brings, so never done on the engine's worker thread."""
    return bool(params.tools) or params.response_format is not None


def prepare_sequence(engine: Engine, messages: list[dict] | str, params: SamplingParams,
                     request_id: str, chat_template_kwargs: dict | None,
                     budget: Budget | None = None) -> Sequence:
    """Engine.prepare: raises ValueError naming the problem (PreparationAborted, a ValueError,
    when `budget` runs out or its request is cancelled)."""
    if not isinstance(params, SamplingParams):
        raise ValueError("params must be a SamplingParams")
    if not messages:
        raise ValueError("messages must be a non-empty list")
    kwargs = chat_template_kwargs or {}
    if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
        raise ValueError("chat_template_kwargs must be a dict with string keys")
    if TEMPLATE_NAMES & set(kwargs):
        raise ValueError(f"chat_template_kwargs may not set "
                         f"{', '.join(sorted(TEMPLATE_NAMES & set(kwargs)))} (names the chat "
                         "template itself uses)")
    if kwargs and len(repr(kwargs)) > MAX_TEMPLATE_KWARGS_CHARS:
        raise ValueError(f"chat_template_kwargs: at most {MAX_TEMPLATE_KWARGS_CHARS} characters")
    if kwargs and isinstance(messages, str):
        raise ValueError("chat_template_kwargs apply to chat messages, not a raw prompt")
    chars = prompt_chars(messages)
    if chars > engine.config.max_prompt_chars:
        raise ValueError(f"prompt of {chars} characters (every part of every message, "
                         f"{MESSAGE_CHARS} per message) exceeds max_prompt_chars "
                         f"{engine.config.max_prompt_chars}")
    # a str is a raw prompt (/v1/completions): tokenized as is, without the chat template
    if params.tools and "tools" not in kwargs:  # templates with tool support (Qwen, Hermes)
        kwargs = {**kwargs, "tools": list(params.tools)}
    try:
        prompt = (engine.tokenizer.encode(messages) if isinstance(messages, str)
                  else engine.tokenizer.encode_chat(messages, **kwargs))
    except (jinja2.TemplateError, TypeError, ValueError, KeyError, AttributeError, IndexError,
            RecursionError) as exc:
        # the template met a value it cannot use (a message or chat_template_kwargs entry of
        # the wrong type): the request's fault, said as such
        raise ValueError(f"the chat template cannot render these messages / "
                         f"chat_template_kwargs: {type(exc).__name__}: {str(exc)[:200]}") from exc
    mc = engine.model_config
    if params.decoding is None:  # the model's own default (its generation_config.json)
        params = dataclasses.replace(params, decoding=engine.default_decoding)
    if params.tools or params.response_format:
        # constrained rows decode under the engine's own rules: the reference decoders
        # re-predict decoded slots (SDAR's top-k), which would overwrite the laid skeleton
        params = dataclasses.replace(params, decoding="fast")
    params, rules = resolve(params, mc)  # the family's own decoding unless "fast"
    plan = build_plan(params.tools, params.tool_choice, params.response_format,
                      engine.tokenizer, int(mc.eos_token_ids[0]), params.max_new_tokens,
                      messages=None if isinstance(messages, str) else messages,
                      budget=budget)
    state = plan.start() if plan is not None else None
    if state is not None and state.structured:  # the answer is the skeleton: its length
        params = dataclasses.replace(params, max_new_tokens=plan.max_length)
    if plan is not None and len(prompt) + plan.max_length > engine.max_seq_len:
        raise ValueError(f"prompt ({len(prompt)} tokens) + the longest structured answer "
                         f"({plan.max_length}) exceeds max_seq_len {engine.max_seq_len}")
    model_block = mc.block_size if mc.block_causal else 0
    decode_block = params.block_size
    if model_block and model_block % decode_block:
        raise ValueError(f"block_size {decode_block} must divide the model's trained block "
                         f"{model_block} ({engine.model_name} is block-causal)")
    seq = Sequence(request_id, prompt,
                   params, model_block, decode_block, int(mc.logit_shift),
                   engine.config.prefix_cache and rules.prefix_cache, rules=rules)
    seq.constraint = state
    if seq.canvas_end > engine.max_seq_len:
        raise ValueError(f"prompt ({seq.prompt_len} tokens) + max_new_tokens "
                         f"({params.max_new_tokens}) exceeds max_seq_len {engine.max_seq_len}")
    return seq
