"""Parse and validate an OpenAI legacy completions request (`POST /v1/completions`).

`parse_completion_request(body, model_ids=..., defaults=...) -> CompletionRequest` turns the JSON
body into one raw prompt string plus a frozen `engine.SamplingParams`, or raises `OpenAIError`
(400 invalid, 404 unknown model), exactly as the chat parser does. The prompt is fed to the
engine as is, without the chat template. Sampling fields, diffusion knobs (`extra_body`) and
`stream` / `stream_options` mean what they mean for chat (shared code in request.py).

Supported beyond chat's fields: `prompt` (a string, or a list holding one string), `echo`
(prepend the prompt to the answer). Accepted only at their neutral value: `suffix` (null),
`logprobs` (null), `best_of` (1), `top_p` (1), penalties (0), `logit_bias` ({}). Pure: knows
nothing about HTTP or the engine's internals.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from diffvoice.engine.params import SamplingParams
from diffvoice.voice.openai_api.request import (
    OpenAIError,
    _invalid,
    sampling_params,
    stream_flags,
)

_NEUTRAL: dict[str, Any] = {
    "top_p": 1, "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": {}, "best_of": 1,
    "logprobs": 0, "suffix": "",
}
_IGNORED = frozenset({"user", "metadata", "store", "service_tier", "safety_identifier",
                      "prompt_cache_key"})
_KNOWN = frozenset({
    "model", "prompt", "max_tokens", "temperature", "seed", "stop", "stream", "stream_options",
    "n", "echo", "reasoning_effort",
    "steps_per_block", "threshold", "entropy_bound", "block_size", "policy", "ignore_eos",
})


@dataclass(frozen=True)
class CompletionRequest:
    model: str
    prompt: str
    params: SamplingParams
    stream: bool
    include_usage: bool
    echo: bool


def _check_fields(body: dict) -> None:
    for name, value in body.items():
        if name in _KNOWN or name in _IGNORED or value is None:
            continue
        if name in _NEUTRAL:
            if value != _NEUTRAL[name]:
                raise _invalid(f"'{name}' is not supported by this server (only "
                               f"{_NEUTRAL[name]!r} or null).", name, "unsupported_parameter")
            continue
        if name in ("messages", "max_completion_tokens"):
            raise _invalid(f"'{name}' belongs to /v1/chat/completions; /v1/completions takes "
                           "'prompt' and 'max_tokens'.", name, "unknown_parameter")
        raise _invalid(f"Unrecognized request argument supplied: {name}", name,
                       "unknown_parameter")


def _prompt(raw: Any) -> str:
    if isinstance(raw, list):
        if len(raw) != 1:
            raise _invalid(f"Only one prompt per request is supported, got {len(raw)}.",
                           "prompt", "unsupported_value")
        raw = raw[0]
    if not isinstance(raw, str):
        raise _invalid("'prompt' must be a string (token-id prompts are not supported).",
                       "prompt")
    if not raw:
        raise _invalid("'prompt' must not be empty.", "prompt")
    return raw


def parse_completion_request(body: Any, *, model_ids: tuple[str, ...],
                             defaults: SamplingParams) -> CompletionRequest:
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
    prompt = _prompt(body.get("prompt"))
    echo = body.get("echo", False)
    if echo is None:
        echo = False
    if not isinstance(echo, bool):
        raise _invalid("'echo' must be a boolean.", "echo")
    stream, include_usage = stream_flags(body)
    return CompletionRequest(model=model, prompt=prompt, params=sampling_params(body, defaults),
                             stream=stream, include_usage=include_usage, echo=echo)
