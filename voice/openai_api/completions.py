"""`POST /v1/completions`: OpenAI's legacy text completions over the same engine as chat.

`add_completions_route(router, state, model_ids=..., metrics=...)` adds the route to the router
that make_router builds (same auth, error shapes, disconnect handling, slot release and
metrics as chat). The prompt is raw text, tokenized without the chat template. Responses:

- JSON `{"object": "text_completion", "choices": [{"text", "index", "logprobs": null,
  "finish_reason"}], "usage"}`;
- with `stream: true`, server-sent events: one `text_completion` chunk per committed engine
  block (`choices[0].text` is that block's text), a last chunk with the finish reason, with
  `stream_options.include_usage` a usage chunk (empty `choices`), then `data: [DONE]`.

`echo: true` puts the prompt in front of the answer (in the first chunk when streaming).
Request parsing lives in completion_request.py; knows nothing about the voice pipeline.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from diffvoice.engine import EngineOverloaded
from diffvoice.voice.openai_api.client_limits import (
    API_PRIORITY,
    ClientLimits,
    Lease,
)
from diffvoice.voice.openai_api.common import (
    _check_auth,
    _default_params,
    _engine_errors,
    _finish_reason,
    _SlotReleasingStream,
    _sse,
    _unless_disconnected,
    _usage,
    counted,
)
from diffvoice.voice.openai_api.completion_request import (
    CompletionRequest,
    parse_completion_request,
)
from diffvoice.voice.openai_api.metrics import ApiMetrics
from diffvoice.voice.openai_api.request import OpenAIError

log = logging.getLogger(__name__)


def add_completions_route(router: APIRouter, state: Any, *,
                          model_ids: Callable[[], tuple[str, ...]], metrics: ApiMetrics,
                          limits: ClientLimits, pool: Executor | None = None) -> None:
    engine = state.engine

    @router.post("/v1/completions")
    async def completions(request: Request) -> Response:
        _check_auth(request, tuple(getattr(state.config, "api_keys", None) or ()))
        ids, defaults = model_ids(), _default_params(state)
        return await counted(
            request, state, limits, pool, engine,
            lambda body: parse_completion_request(body, model_ids=ids, defaults=defaults),
            lambda req: req.prompt, lambda req, lease: _complete(request, req, lease))

    async def _complete(request: Request, req: CompletionRequest, lease: Lease) -> Response:
        request_id = f"cmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        deltas = engine.generate(req.prompt, req.params, request_id=request_id,
                                 priority=API_PRIORITY, client=lease.key)
        if req.stream:
            return await _stream(request, req, deltas, request_id, created, lease)
        try:
            text, last = await _unless_disconnected(request, _collect(deltas))
        except (EngineOverloaded, ValueError) as exc:
            engine.abort(request_id)
            raise _engine_errors(exc) from exc
        except BaseException:
            engine.abort(request_id)  # client gone, cancelled or engine failure: free the slot
            raise
        finish_reason = _finish_reason(last)
        metrics.observe_finished(req.model, last)
        return JSONResponse({
            "id": request_id, "object": "text_completion", "created": created,
            "model": req.model,
            "choices": [{"text": (req.prompt if req.echo else "") + text, "index": 0,
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": _usage(last),
        })

    async def _collect(deltas: AsyncIterator[Any]) -> tuple[str, Any]:
        parts, last = [], None
        async for delta in deltas:
            parts.append(delta.text)
            last = delta
        return "".join(parts), last

    async def _stream(request: Request, req: CompletionRequest, deltas: AsyncIterator[Any],
                      request_id: str, created: int, lease: Lease) -> Response:
        # first block before the headers, so overload / bad prompt still get a status code
        try:
            first = await _unless_disconnected(request, anext(deltas))
        except (EngineOverloaded, ValueError) as exc:
            engine.abort(request_id)
            raise _engine_errors(exc) from exc
        except BaseException:
            engine.abort(request_id)
            raise

        def chunk(text: str, finish_reason: str | None = None) -> str:
            payload = {"id": request_id, "object": "text_completion", "created": created,
                       "model": req.model,
                       "choices": [{"text": text, "index": 0, "logprobs": None,
                                    "finish_reason": finish_reason}]}
            if req.include_usage:
                payload["usage"] = None
            return _sse(payload)

        finished = first.finished

        async def events() -> AsyncIterator[str]:
            nonlocal finished
            delta = first
            try:
                if req.echo:
                    yield chunk(req.prompt)
                while True:
                    if delta.text:
                        yield chunk(delta.text)
                    if delta.finished:
                        break
                    delta = await anext(deltas)
                    finished = delta.finished
                yield chunk("", _finish_reason(delta))
                metrics.observe_finished(req.model, delta)
                if req.include_usage:
                    yield _sse({"id": request_id, "object": "text_completion",
                                  "created": created, "model": req.model, "choices": [],
                                  "usage": _usage(delta)})
            except OpenAIError as exc:
                yield _sse(exc.body())
            except (EngineOverloaded, ValueError, RuntimeError) as exc:
                log.exception("engine failed mid-stream for %s", request_id)
                yield _sse(OpenAIError(500, f"Engine error: {exc}", type="server_error",
                                         code="engine_error").body())
            yield _sse("[DONE]")

        def release() -> None:  # however the response ended, never leave the slot held
            lease.release()
            if not finished:
                engine.abort(request_id)

        return _SlotReleasingStream(events(), on_close=release)
