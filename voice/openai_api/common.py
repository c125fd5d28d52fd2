"""What the OpenAI-compatible routes share (voice.openai_api.router: chat, .completions: raw
completions): auth, default parameters, disconnect handling, error mapping, usage, SSE framing
and the response that releases an engine slot however it ends."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from diffvoice.engine import EngineOverloaded, PriorityRefused, SamplingParams
from diffvoice.voice.json_input import JSONInputError, loads_untrusted
from diffvoice.voice.openai_api.client_limits import charge, enter, prompt_cost
from diffvoice.voice.openai_api.metrics import ApiMetrics
from diffvoice.voice.openai_api.request import (
    OpenAIError,
    api_field_names,
)

log = logging.getLogger(__name__)

OVERLOAD_RETRY_AFTER_S = 1


class _OpenAIRoute(APIRoute):
    """Turns OpenAIError (raised by handlers) into OpenAI-shaped JSON error responses, and
    counts every response on `metrics` (set per router by make_router)."""

    metrics: ApiMetrics | None = None

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        metrics = self.metrics

        async def handle(request: Request) -> Response:
            try:
                response = await handler(request)
            except OpenAIError as exc:
                headers = ({"Retry-After": str(exc.retry_after_s or OVERLOAD_RETRY_AFTER_S)}
                           if exc.status in (429, 503)
                           else {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None)
                response = JSONResponse(exc.body(), status_code=exc.status, headers=headers)
                if metrics is not None:
                    metrics.observe_error(exc.code)
            except Exception:
                if metrics is not None:
                    metrics.observe_status(self.path, request.method, 500)
                raise
            if metrics is not None:
                metrics.observe_status(self.path, request.method, response.status_code)
            return response

        return handle


class _SlotReleasingStream(StreamingResponse):
    """A StreamingResponse that runs `on_close` (synchronously) however the response ends,
    including cancellation when the client disconnects mid-stream."""

    def __init__(self, content: AsyncIterator[str], on_close: Callable[[], None],
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(content, media_type="text/event-stream",
                         headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no",
                                  **(headers or {})})
        self._on_close = on_close

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def _default_params(state: Any) -> SamplingParams:
    """The engine's defaults with the server's configured answer length and steps on top."""
    engine_config = getattr(state.engine, "config", None)
    base = getattr(engine_config, "default_params", None) or SamplingParams()
    overrides = {}
    for name in ("max_new_tokens", "steps_per_block"):
        value = getattr(state.config, name, None)
        if value is not None:
            overrides[name] = value
    return dataclasses.replace(base, **overrides)


def _check_auth(request: Request, api_keys: tuple[str, ...]) -> None:
    if not api_keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise OpenAIError(401, "Missing bearer token: send 'Authorization: Bearer <API key>'.",
                          code="missing_api_key")
    # compare against every key (no early exit) so timing does not reveal which one matched
    matched = [hmac.compare_digest(token.encode(), key.encode()) for key in api_keys]
    if not any(matched):
        raise OpenAIError(401, "Incorrect API key provided.", code="invalid_api_key")


async def _wait_for_disconnect(request: Request) -> None:
    """Returns once the client has gone (the body has already been read)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def _unless_disconnected(request: Request, work: Awaitable[Any]) -> Any:
    """Await `work` in a task; cancel it (aborting its engine request) if the client leaves."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(_wait_for_disconnect(request))
    try:
        await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            raise OpenAIError(499, "Client closed the request.", code="client_closed")
        return task.result()
    finally:
        watcher.cancel()
        task.cancel()


def _engine_errors(exc: Exception) -> OpenAIError:
    if isinstance(exc, PriorityRefused):  # the API's share of the engine is full
        return OpenAIError(429, f"The server's capacity for API requests is in use ({exc}); "
                           "retry shortly.", type="rate_limit_error",
                           code="rate_limit_exceeded")
    if isinstance(exc, EngineOverloaded):
        return OpenAIError(503, f"The engine is overloaded ({exc}); retry shortly.",
                           type="server_error", code="engine_overloaded")
    message = api_field_names(str(exc))
    head = message.split(":", 1)[0].split("[", 1)[0].split(".", 1)[0].split(" ", 1)[0]
    param = head if head in ("tools", "tool_choice", "response_format") else None
    return OpenAIError(400, message, param=param, code="invalid_value")


def _usage(delta: Any) -> dict[str, int]:
    return {"prompt_tokens": delta.prompt_tokens, "completion_tokens": delta.completion_tokens,
            "total_tokens": delta.prompt_tokens + delta.completion_tokens}


def _finish_reason(delta: Any) -> str:
    if delta.finish_reason == "abort":
        raise OpenAIError(503, "The engine aborted this request.", type="server_error",
                          code="engine_aborted")
    return delta.finish_reason or "stop"


def _tool_call(call: dict[str, str]) -> dict[str, Any]:
    return {"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
            "function": {"name": call["name"], "arguments": call["arguments"]}}


ARGUMENT_CHUNK_CHARS = 24


def _tool_call_deltas(call: dict[str, str]) -> list[dict[str, Any]]:
    """OpenAI's streamed shape: index, id, type and name (arguments ""), then argument pieces."""
    full = _tool_call(call)
    parts = [{"index": 0, "id": full["id"], "type": "function",
              "function": {"name": call["name"], "arguments": ""}}]
    args = call["arguments"]
    for i in range(0, len(args), ARGUMENT_CHUNK_CHARS):
        parts.append({"index": 0, "function": {"arguments": args[i:i + ARGUMENT_CHUNK_CHARS]}})
    return parts


def _sse(payload: dict[str, Any] | str) -> str:
    data = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return f"data: {data}\n\n"


def parse_json(raw: bytes) -> Any:
    """A request body's JSON; huge ints, deep nesting and lone surrogates are client mistakes
    too: 400 invalid_json. Grows with the body: run it off the event loop."""
    try:
        return loads_untrusted(raw)
    except JSONInputError as exc:
        raise OpenAIError(400, f"The request body is not valid JSON: {exc}",
                          code="invalid_json") from exc


async def counted(request: Request, state: Any, limits: Any, pool: Any, engine: Any,
                  parse: Callable[[Any], Any], prompt_of: Callable[[Any], Any],
                  serve: Callable[[Any, Any], Awaitable[Response]]) -> Response:
    """Serve a /v1 request counted before it runs (voice.openai_api.client_limits): its
    client's concurrency is taken before the body is read; the JSON, `parse(body) -> request`
    and the prompt's cost run on `pool` (they grow with the body: never on the loop); its
    tokens are charged; then `serve(request, lease)`. A streamed response releases the lease
    when it ends, any other outcome here."""
    lease = enter(limits, request, state)
    handed = False  # to the stream, which releases the lease when it ends
    try:
        def parsed(raw: bytes) -> tuple[Any, int]:
            req = parse(parse_json(raw))
            return req, prompt_cost(engine, prompt_of(req))

        req, cost = await asyncio.get_running_loop().run_in_executor(
            pool, parsed, await request.body())
        charge(lease, engine, req.params, cost)
        response = await serve(req, lease)
        handed = req.stream
        return response
    finally:
        if not handed:
            lease.release()
