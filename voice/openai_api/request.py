"""Parse and validate an OpenAI chat-completions request body into engine inputs.

`parse_chat_request(body, model_ids=..., defaults=...) -> ChatRequest` turns the JSON body of
`POST /v1/chat/completions` into chat messages plus a frozen `engine.SamplingParams`, or raises
`OpenAIError` carrying the HTTP status and OpenAI's error shape
(`{"error": {"message", "type", "param", "code"}}`). Pure: knows nothing about HTTP, the event loop
or the engine's internals; the router turns `OpenAIError` into a response.

Tools: `tools`, `tool_choice`, `parallel_tool_calls` (at most one call per turn is made),
`response_format` (text / json_object / json_schema) become SamplingParams fields; assistant
messages may carry `tool_calls`, and `tool` messages (with `tool_call_id`) carry results.

Diffusion knobs arrive as extra top-level fields (the OpenAI client's `extra_body`):
`steps_per_block`, `threshold`, `entropy_bound`, `block_size`, `policy`, `ignore_eos`.
`reasoning_effort` is mapped onto them (see `EFFORT_PRESETS`); explicit knobs win over the preset.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Any

from diffvoice.engine.params import DECODINGS, POLICIES, SamplingParams


class OpenAIError(Exception):
    """An error the API reports to the client in OpenAI's shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str = "invalid_request_error",  # noqa: A002 - OpenAI's field name
                 retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s  # a Retry-After header (429 / 503)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param,
                          "code": self.code}}


def _invalid(message: str, param: str | None, code: str = "invalid_value") -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)


# reasoning_effort -> overrides of the server's default SamplingParams. "medium" is the server's
# own default; lower efforts commit by confidence threshold (fewer passes per block, adaptively),
# higher ones run more fixed passes per block (the engine clamps steps to the block size).
EFFORT_PRESETS: dict[str, dict[str, Any]] = {
    "none": {"policy": "threshold", "threshold": 0.5},
    "minimal": {"policy": "threshold", "threshold": 0.5},
    "low": {"policy": "threshold", "threshold": 0.9},
    "medium": {},
    "high": {"policy": "low_confidence", "steps_per_block_scale": 2},
    "xhigh": {"policy": "low_confidence", "steps_per_block_scale": 4},
    "max": {"policy": "low_confidence", "steps_per_block_scale": 8},
}

# Fields OpenAI defines that we do not implement: accepted only at their neutral value (or null),
# so clients that always send defaults keep working. Anything else -> 400 unsupported_parameter.
_NEUTRAL: dict[str, Any] = {
    "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0, "logprobs": False,
    "logit_bias": {}, "functions": [], "modalities": ["text"],
}
# Fields that change nothing about the answer; accepted and ignored.
_IGNORED = frozenset({"user", "metadata", "store", "service_tier", "safety_identifier",
                      "prompt_cache_key", "verbosity"})
_KNOWN = frozenset({
    "model", "messages", "max_tokens", "max_completion_tokens", "temperature", "seed", "stop",
    "stream", "stream_options", "n", "reasoning_effort",
    "steps_per_block", "threshold", "entropy_bound", "block_size", "policy", "ignore_eos",
    "tools", "tool_choice", "parallel_tool_calls", "response_format",
    "decoding",
    "chat_template_kwargs",  # vLLM's extension: extra chat-template variables
})
_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant",
          "tool": "tool"}


@dataclass(frozen=True)
class ChatRequest:
    model: str
    messages: tuple[dict[str, Any], ...]   # [{"role", "content": str, + tool_calls / tool_call_id}]
    params: SamplingParams
    stream: bool
    include_usage: bool
    chat_template_kwargs: dict[str, Any] | None = None  # e.g. {"enable_thinking": False}


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def _int_field(body: dict, name: str, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not _is_int(value) or value < minimum:
        raise _invalid(f"'{name}' must be an integer >= {minimum}, got {value!r}.", name)
    return value


def _text_content(content: Any, param: str) -> str:
    """A message's content: a string or a list of {"type": "text", "text": str} parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for j, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                kind = part.get("type") if isinstance(part, dict) else type(part).__name__
                raise _invalid(f"Content part type {kind!r} is not supported; only 'text' parts "
                               "are.", f"{param}[{j}]", "unsupported_content")
            if not isinstance(part.get("text"), str):
                raise _invalid("A text content part needs a string 'text'.", f"{param}[{j}].text")
            texts.append(part["text"])
        return "".join(texts)
    raise _invalid("Message content must be a string or a list of text parts.", param)


def _parse_messages(raw: Any) -> tuple[dict[str, Any], ...]:
    if not isinstance(raw, list) or not raw:
        raise _invalid("'messages' must be a non-empty array.", "messages")
    messages = []
    for i, message in enumerate(raw):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise _invalid("Each message must be an object.", param)
        role = message.get("role")
        if role not in _ROLES:
            raise _invalid(f"Unsupported role {role!r}; supported: system, developer, user, "
                           "assistant, tool.", f"{param}.role")
        allowed = {"role", "content", "name"} | (
            {"tool_calls", "refusal"} if role == "assistant" else
            {"tool_call_id"} if role == "tool" else set())
        extra = sorted(set(message) - allowed - {k for k, v in message.items() if v is None})
        if extra:
            raise _invalid(f"Message field '{extra[0]}' is not supported.", f"{param}.{extra[0]}",
                           "unsupported_parameter")
        out: dict[str, Any] = {"role": _ROLES[role]}
        if role == "assistant" and message.get("tool_calls"):
            out["tool_calls"] = parse_tool_calls(message["tool_calls"], f"{param}.tool_calls")
            content = message.get("content")
            out["content"] = "" if content is None else _text_content(content, f"{param}.content")
        else:
            out["content"] = _text_content(message.get("content"), f"{param}.content")
        if role == "tool":
            if not isinstance(message.get("tool_call_id"), str):
                raise _invalid("A tool message needs a string 'tool_call_id'.",
                               f"{param}.tool_call_id")
            out["tool_call_id"] = message["tool_call_id"]
        messages.append(out)
    return tuple(messages)


def parse_tool_calls(raw: Any, param: str) -> list[dict[str, Any]]:
    """An assistant message's `tool_calls`, kept in OpenAI's shape (arguments as JSON text)."""
    if not isinstance(raw, list):
        raise _invalid("'tool_calls' must be an array.", param)
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if (not isinstance(fn, dict) or not isinstance(fn.get("name"), str)
                or not isinstance(fn.get("arguments"), str)):
            raise _invalid("Each tool call needs function.name and function.arguments (a JSON "
                           "string).", f"{param}[{j}]")
        calls.append({"id": str(call.get("id") or f"call_{j}"), "type": "function",
                      "function": {"name": fn["name"], "arguments": fn["arguments"]}})
    return calls


def _tools(body: dict) -> dict[str, Any]:
    """tools / tool_choice / response_format -> SamplingParams fields (shape checks here; the
    engine checks the schemas themselves and names the offending path)."""
    fields: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _invalid("'tools' must be an array of function tools.", "tools")
        for i, tool in enumerate(tools):
            fn = tool.get("function") if isinstance(tool, dict) else None
            if (not isinstance(tool, dict) or tool.get("type") != "function"
                    or not isinstance(fn, dict) or not isinstance(fn.get("name"), str)):
                raise _invalid("Each tool must be {'type': 'function', 'function': {'name': ..., "
                               "'parameters': {...}}}.", f"tools[{i}]")
            if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
                raise _invalid("'parameters' must be a JSON schema object.",
                               f"tools[{i}].function.parameters")
        if tools:
            fields["tools"] = tuple(tools)
    choice = body.get("tool_choice")
    if choice is not None:
        if choice in ("none", "auto", "required"):
            pass
        elif isinstance(choice, dict) and choice.get("type") == "function" and isinstance(
                (choice.get("function") or {}).get("name"), str):
            names = [t["function"]["name"] for t in (tools or [])]
            if choice["function"]["name"] not in names:
                raise _invalid(f"tool_choice names function {choice['function']['name']!r}, "
                               "which is not in 'tools'.", "tool_choice")
        else:
            raise _invalid("'tool_choice' must be 'none', 'auto', 'required' or {'type': "
                           "'function', 'function': {'name': ...}}.", "tool_choice")
        if choice != "none" and not tools:
            if choice != "auto":
                raise _invalid("'tool_choice' needs 'tools'.", "tool_choice")
        else:
            fields["tool_choice"] = choice
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise _invalid("'parallel_tool_calls' must be a boolean.", "parallel_tool_calls")
    fmt = body.get("response_format")
    if fmt is not None:
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
                raise _invalid("'response_format.json_schema.schema' must be a JSON schema "
                               "object.", "response_format.json_schema.schema")
            fields["response_format"] = fmt
        elif kind == "json_object":
            fields["response_format"] = fmt
        elif kind != "text":
            raise _invalid("'response_format.type' must be 'text', 'json_object' or "
                           "'json_schema'.", "response_format.type")
    return fields


def _check_fields(body: dict) -> None:
    for name, value in body.items():
        if name in _KNOWN or name in _IGNORED or value is None:
            continue
        if name in _NEUTRAL:
            if value != _NEUTRAL[name]:
                raise _invalid(f"'{name}' is not supported by this server (only "
                               f"{_NEUTRAL[name]!r}).", name, "unsupported_parameter")
            continue
        raise _invalid(f"Unrecognized request argument supplied: {name}", name,
                       "unknown_parameter")


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = [value]
    if (not isinstance(value, list) or len(value) > 4
            or not all(isinstance(s, str) and s for s in value)):
        raise _invalid("'stop' must be a non-empty string or a list of up to 4 non-empty "
                       "strings.", "stop")
    return tuple(value)


def _max_tokens(body: dict) -> int | None:
    max_tokens = _int_field(body, "max_tokens", 1)
    max_completion = _int_field(body, "max_completion_tokens", 1)
    if max_tokens is not None and max_completion is not None and max_tokens != max_completion:
        raise _invalid("Give either 'max_tokens' or 'max_completion_tokens', not both with "
                       "different values.", "max_tokens")
    return max_completion if max_completion is not None else max_tokens


def _knobs(body: dict, defaults: SamplingParams) -> dict[str, Any]:
    """reasoning_effort preset, then explicit diffusion knobs on top."""
    overrides: dict[str, Any] = {}
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in EFFORT_PRESETS:
            raise _invalid(f"'reasoning_effort' must be one of {list(EFFORT_PRESETS)}, got "
                           f"{effort!r}.", "reasoning_effort")
        overrides = dict(EFFORT_PRESETS[effort])
        scale = overrides.pop("steps_per_block_scale", None)
        if scale is not None:
            overrides["steps_per_block"] = defaults.steps_per_block * scale
    policy = body.get("policy")
    if policy is not None:
        if policy not in POLICIES:
            raise _invalid(f"'policy' must be one of {list(POLICIES)}, got {policy!r}.", "policy")
        overrides["policy"] = policy
    steps = _int_field(body, "steps_per_block", 1)
    if steps is not None:
        overrides["steps_per_block"] = steps
    if body.get("block_size") is not None:
        overrides["block_size"] = _int_field(body, "block_size", 1)
    threshold = body.get("threshold")
    if threshold is not None:
        if not _is_number(threshold) or not 0.0 < threshold <= 1.0:
            raise _invalid(f"'threshold' must be a number in (0, 1], got {threshold!r}.",
                           "threshold")
        overrides["threshold"] = float(threshold)
        if policy is None:  # a threshold only means something to the threshold policy
            overrides["policy"] = "threshold"
    bound = body.get("entropy_bound")
    if bound is not None:
        if not _is_number(bound) or bound < 0:
            raise _invalid(f"'entropy_bound' must be a number >= 0, got {bound!r}.",
                           "entropy_bound")
        overrides["entropy_bound"] = float(bound)
        if policy is None:
            overrides["policy"] = "entropy"
    decoding = body.get("decoding")  # the family's own decoding ("reference") or "fast"
    if decoding is not None:
        if decoding not in DECODINGS:
            raise _invalid(f"'decoding' must be one of {list(DECODINGS)}, got {decoding!r}.",
                           "decoding")
        overrides["decoding"] = decoding
    ignore_eos = body.get("ignore_eos")
    if ignore_eos is not None:
        if not isinstance(ignore_eos, bool):
            raise _invalid("'ignore_eos' must be a boolean.", "ignore_eos")
        overrides["ignore_eos"] = ignore_eos
    return overrides


def parse_chat_request(body: Any, *, model_ids: tuple[str, ...],
                       defaults: SamplingParams) -> ChatRequest:
    """Validate `body`; raise OpenAIError (400 invalid, 404 unknown model) on bad input."""
    if not isinstance(body, dict):
        raise _invalid("The request body must be a JSON object.", None)
    _check_fields(body)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _invalid("'model' is required and must be a string.", "model")
    if model not in model_ids:
        raise OpenAIError(404, f"The model '{model}' does not exist. Available: "
                          f"{', '.join(model_ids)}.", param="model", code="model_not_found")
    messages = _parse_messages(body.get("messages"))

    stream, include_usage = stream_flags(body)
    params = sampling_params(body, defaults)
    return ChatRequest(model=model, messages=messages, params=params, stream=stream,
                       include_usage=include_usage,
                       chat_template_kwargs=_template_kwargs(body.get("chat_template_kwargs")))


def stream_flags(body: dict) -> tuple[bool, bool]:
    """(stream, stream_options.include_usage) of a chat or completions body; n must be 1."""
    n = _int_field(body, "n", 1)
    if n is not None and n != 1:
        raise _invalid("Only n=1 is supported.", "n", "unsupported_value")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise _invalid("'stream' must be a boolean.", "stream")
    include_usage = False
    options = body.get("stream_options")
    if options is not None:
        if not stream:
            raise _invalid("The 'stream_options' parameter is only allowed when 'stream' is "
                           "enabled.", "stream_options")
        if not isinstance(options, dict) or set(options) - {"include_usage"}:
            raise _invalid("'stream_options' supports only 'include_usage'.", "stream_options")
        include_usage = options.get("include_usage") or False
        if not isinstance(include_usage, bool):
            raise _invalid("'stream_options.include_usage' must be a boolean.",
                           "stream_options.include_usage")
    return stream, include_usage


def sampling_params(body: dict, defaults: SamplingParams) -> SamplingParams:
    """The SamplingParams of a chat or completions body: knobs, max_tokens, temperature, seed,
    stop on top of `defaults`. Errors name the API's fields (`max_tokens`, not the engine's
    `max_new_tokens`)."""
    fields: dict[str, Any] = _knobs(body, defaults)
    fields.update(_tools(body))
    max_tokens = _max_tokens(body)
    if max_tokens is not None:
        fields["max_new_tokens"] = max_tokens
    temperature = body.get("temperature")
    if temperature is not None:
        if not _is_number(temperature) or not 0 <= temperature <= 2:
            raise _invalid(f"'temperature' must be a number in [0, 2], got {temperature!r}.",
                           "temperature")
        fields["temperature"] = float(temperature)
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed):
            raise _invalid(f"'seed' must be an integer, got {seed!r}.", "seed")
        fields["seed"] = seed
    if body.get("stop") is not None:
        fields["stop"] = _stop(body["stop"])
    try:
        return dataclasses.replace(defaults, **fields)
    except ValueError as exc:  # SamplingParams names the field in its message
        raise _invalid(api_field_names(str(exc)), _param_from_message(str(exc))) from exc


# engine field -> the API's name for it, in error messages the client reads
_API_NAMES = {"max_new_tokens": "max_tokens"}


def api_field_names(message: str) -> str:
    """`message` with the engine's field names replaced by the API's (max_new_tokens ->
    max_tokens), so an error names what the client sent."""
    for ours, theirs in _API_NAMES.items():
        message = re.sub(rf"\b{ours}\b", theirs, message)
    return message


def _template_kwargs(value: Any) -> dict[str, Any] | None:
    """vLLM's `chat_template_kwargs`: a JSON object of variables for the model's chat template."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _invalid("'chat_template_kwargs' must be an object.", "chat_template_kwargs")
    for name in ("messages", "add_generation_prompt"):
        if name in value:
            raise _invalid(f"'chat_template_kwargs' may not set '{name}'.", "chat_template_kwargs")
    return dict(value)


def _param_from_message(message: str) -> str | None:
    name = message.split(" ", 1)[0]
    return _API_NAMES.get(name, name if name in _KNOWN else None)
