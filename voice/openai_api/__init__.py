"""OpenAI-compatible chat completions over the shared in-process diffusion engine.

`make_router(state) -> fastapi.APIRouter` serves `GET /v1/models` and `POST /v1/chat/completions`
(streaming and not) from `state.engine`, with optional bearer-token auth from
`state.config.api_keys`. Mount it on the voice server's app (API and voice requests then batch
together in one engine) or alone (`diffvoice serve --api-only`). See docs/openai-api.md.
"""

from diffvoice.voice.openai_api.request import (
    EFFORT_PRESETS,
    ChatRequest,
    OpenAIError,
    parse_chat_request,
)
from diffvoice.voice.openai_api.router import make_router

__all__ = ["EFFORT_PRESETS", "ChatRequest", "OpenAIError", "make_router", "parse_chat_request"]
