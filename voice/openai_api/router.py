"""HTTP layer of the OpenAI-compatible API: `make_router(state) -> fastapi.APIRouter`.

Routes: `GET /v1/models`, `GET /v1/models/{model}`, `POST /v1/chat/completions` (JSON or, with
`stream: true`, server-sent events: one `chat.completion.chunk` per committed engine block, then
`data: [DONE]`). `state` is anything with `.engine` (engine.Engine) and `.config` (a
ServeConfig-like object; read: `api_keys`, optional `max_new_tokens`, `steps_per_block`).

Contract:
- Every error is OpenAI-shaped JSON: 400 invalid request, 401 bad/missing bearer key (only when
  `config.api_keys` is non-empty), 404 unknown model, 503 engine overloaded (with Retry-After).
- The engine is never waited on synchronously: `engine.generate` is async and runs its own thread.
- Tools: a call arrives whole on the engine's final delta (its skeleton is committed up front
  and only its values are decoded); it is sent as `message.tool_calls` with finish_reason
  "tool_calls", or streamed as OpenAI does (id/type/name first, then argument pieces).
  A request whose tools are the loaded receptionist's own (same names and arguments, e.g. the
  plain schemas of docs/tool-calling.md) is decoded with the served schemas, as voice calls
  are, and its response says `x-diffvoice-tools: served`.
- Clarify guard (ServeConfig.clarify, agent/guard.py; on by default for a model
  directory with a facts.yaml): a chat answer (no response_format, no ignore_eos) whose first
  block the engine committed with confidence below `clarify_below`, or (clarify_whole_reply)
  that is not well-formed, is replaced by the clarifying question; a non-streamed response
  then carries `x-diffvoice-clarified: first_block|not_well_formed`; a whole answer whose
  restated time or day was mended (agent.grounding) `x-diffvoice-grounded:
  substituted|replaced` (`ungrounded`: wrong, nothing to mend it with, passed as is).
- A client that goes away (mid-stream or while a non-streamed answer is being drafted) has its
  engine request aborted, so the slot frees before the engine's next step.
Knows nothing about the voice pipeline; request parsing lives in `request.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from starlette.types import Receive, Scope, Send

from diffvoice.engine import EngineOverloaded, SamplingParams
from diffvoice.voice.json_input import JSONInputError, loads_untrusted
from diffvoice.voice.openai_api.metrics import ApiMetrics, api_metrics_for
from diffvoice.voice.openai_api.request import (
    ChatRequest,
    OpenAIError,
    api_field_names,
    parse_chat_request,
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
                headers = ({"Retry-After": str(OVERLOAD_RETRY_AFTER_S)} if exc.status == 503
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


def _dropped_context(engine: Any, messages: Any, request_id: str) -> str:
    """'system=1,history=2' when the model's chat template leaves messages out (logged), else ''.
    The shipped receptionist renders one previous exchange and no system prompt."""
    dropped_fn = getattr(getattr(engine, "tokenizer", None), "dropped", None)
    try:
        dropped = dropped_fn(list(messages)) if dropped_fn else {}
    except Exception:  # a template that cannot render fails the request in engine.generate
        return ""
    text = ",".join(f"{k}={v}" for k, v in sorted(dropped.items()))
    if text:
        log.warning("%s: the model's chat template ignores %s message(s) (%s); see "
                    "docs/openai-api.md", request_id, sum(dropped.values()), text)
    return text


def _clarify_record(state: Any, chat: ChatRequest):
    """(guard, record) when the clarify guard applies to this chat request, else None: spoken
    answers only (no response_format), and not for `ignore_eos` requests, which ask for exactly
    max_tokens raw tokens (benchmarks at equal answer length: such a reply is cut, not blended)."""
    if chat.params.response_format is not None or not hasattr(state, "config"):
        return None
    if chat.params.ignore_eos:
        return None
    from diffvoice.agent.guard import ClarifyRecord, guard_of

    guard = guard_of(state)
    return None if guard is None else (guard, ClarifyRecord())


def _careful_retry(engine: Any, chat: ChatRequest, request_id: str):
    """The clarify guard's careful retry of a blended reply: the same request decoded one
    token per pass (Engine.careful_params); None for an engine that cannot."""
    careful = getattr(engine, "careful_params", None)
    if careful is None:
        return None
    return lambda: engine.generate(list(chat.messages), careful(chat.params),
                                   request_id=f"{request_id}-careful",
                                   chat_template_kwargs=chat.chat_template_kwargs)


SERVED_TOOLS_HEADER = "x-diffvoice-tools"


def _served_tools(state: Any, chat: ChatRequest) -> tuple[ChatRequest, bool]:
    """A request whose tools are the loaded receptionist's own (by name and arguments) is
    decoded with its served schemas (agent.tools.served_tool_schemas): the book's
    days and times as enums and the conversation slots, as voice calls are. -> (the request,
    whether they were swapped in; the response then says so in x-diffvoice-tools: served)."""
    receptionist = getattr(state, "receptionist", None)
    if receptionist is None or not chat.params.tools or not receptionist.same_tools(
            chat.params.tools):
        return chat, False
    params = dataclasses.replace(chat.params, tools=tuple(receptionist.schemas))
    return dataclasses.replace(chat, params=params), True


def make_router(state: Any) -> APIRouter:
    """The `/v1` routes over `state.engine`, authenticated by `state.config.api_keys`."""
    registry = getattr(getattr(state, "metrics", None), "registry", None)
    api_metrics = api_metrics_for(registry)
    router = APIRouter(route_class=type("_Route", (_OpenAIRoute,), {"metrics": api_metrics}))
    engine = state.engine
    created_at = int(getattr(state, "started_at", None) or time.time())  # unix seconds
    served = served_model_names(state)

    def model_card(model_id: str) -> dict[str, Any]:
        return {"id": model_id, "object": "model", "created": created_at, "owned_by": "diffvoice"}

    def model_ids() -> tuple[str, ...]:
        return served or (engine.model_name,)

    def authorize(request: Request) -> None:
        _check_auth(request, tuple(getattr(state.config, "api_keys", None) or ()))

    @router.get("/v1/models")
    async def list_models(request: Request) -> dict[str, Any]:
        authorize(request)
        return {"object": "list", "data": [model_card(m) for m in model_ids()]}

    @router.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str, request: Request) -> dict[str, Any]:
        authorize(request)
        if model_id not in model_ids():
            raise OpenAIError(404, f"The model '{model_id}' does not exist.", param="model",
                              code="model_not_found")
        return model_card(model_id)

    @router.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        authorize(request)
        try:  # huge ints, deep nesting and lone surrogates are client mistakes too: 400
            body = loads_untrusted(await request.body())
        except JSONInputError as exc:
            raise OpenAIError(400, f"The request body is not valid JSON: {exc}",
                              code="invalid_json") from exc
        chat = parse_chat_request(body, model_ids=model_ids(), defaults=_default_params(state))
        chat, served_tools = _served_tools(state, chat)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        deltas = engine.generate(list(chat.messages), chat.params, request_id=request_id,
                                 chat_template_kwargs=chat.chat_template_kwargs)
        clarify = _clarify_record(state, chat)
        if clarify is not None:  # ServeConfig.clarify: ask instead of an unsure/blended reply
            deltas = clarify[0].wrap(deltas, abort=lambda: engine.abort(request_id),
                                     record=clarify[1],
                                     first_block=clarify[0].calibrated(
                                         chat.params,
                                         getattr(engine, "default_decoding", "reference")),
                                     messages=list(chat.messages),
                                     retry=_careful_retry(engine, chat, request_id))
        dropped = _dropped_context(engine, chat.messages, request_id)
        if chat.stream:
            return await _stream(request, chat, deltas, request_id, created,
                                 {SERVED_TOOLS_HEADER: "served"} if served_tools else {})
        try:
            text, last = await _unless_disconnected(request, _collect(deltas))
        except (EngineOverloaded, ValueError) as exc:
            engine.abort(request_id)
            raise _engine_errors(exc) from exc
        except BaseException:
            engine.abort(request_id)  # client gone, cancelled or engine failure: free the slot
            raise
        finish_reason = _finish_reason(last)
        api_metrics.observe_finished(chat.model, last)
        headers = {"x-diffvoice-dropped": dropped} if dropped else {}
        if served_tools:
            headers[SERVED_TOOLS_HEADER] = "served"
        if clarify is not None and clarify[1].clarified:
            headers["x-diffvoice-clarified"] = clarify[1].reason
        if clarify is not None and clarify[1].grounding:
            headers["x-diffvoice-grounded"] = clarify[1].grounding
        if clarify is not None and clarify[1].retried:
            headers["x-diffvoice-retried"] = "careful"
        message = {"role": "assistant", "content": text, "refusal": None}
        if getattr(last, "tool_call", None) is not None:
            message = {"role": "assistant", "content": None, "refusal": None,
                       "tool_calls": [_tool_call(last.tool_call)]}
        return JSONResponse({
            "id": request_id, "object": "chat.completion", "created": created,
            "model": chat.model,
            "choices": [{"index": 0, "message": message,
                         "logprobs": None, "finish_reason": finish_reason}],
            "usage": _usage(last),
        }, headers=headers or None)

    async def _collect(deltas: AsyncIterator[Any]) -> tuple[str, Any]:
        parts, last = [], None
        async for delta in deltas:
            parts.append(delta.text)
            last = delta
        return "".join(parts), last

    async def _stream(request: Request, chat: ChatRequest, deltas: AsyncIterator[Any],
                      request_id: str, created: int, headers: dict[str, str]) -> Response:
        # Wait for the first block before sending headers, so overload and invalid-prompt errors
        # still get a proper status code; the first chunk needs that block anyway.
        try:
            first = await _unless_disconnected(request, anext(deltas))
        except (EngineOverloaded, ValueError) as exc:
            engine.abort(request_id)
            raise _engine_errors(exc) from exc
        except BaseException:
            engine.abort(request_id)
            raise

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
            payload = {"id": request_id, "object": "chat.completion.chunk", "created": created,
                       "model": chat.model,
                       "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                    "finish_reason": finish_reason}]}
            if chat.include_usage:
                payload["usage"] = None
            return _sse(payload)

        finished = first.finished

        async def events() -> AsyncIterator[str]:
            nonlocal finished
            yield chunk({"role": "assistant", "content": ""})
            delta = first
            try:
                while True:
                    if delta.text:
                        yield chunk({"content": delta.text})
                    if getattr(delta, "tool_call", None) is not None:
                        for part in _tool_call_deltas(delta.tool_call):
                            yield chunk({"tool_calls": [part]})
                    if delta.finished:
                        break
                    delta = await anext(deltas)
                    finished = delta.finished
                yield chunk({}, _finish_reason(delta))
                api_metrics.observe_finished(chat.model, delta)
                if chat.include_usage:
                    yield _sse({"id": request_id, "object": "chat.completion.chunk",
                                "created": created, "model": chat.model, "choices": [],
                                "usage": _usage(delta)})
            except OpenAIError as exc:
                yield _sse(exc.body())
            except (EngineOverloaded, ValueError, RuntimeError) as exc:
                log.exception("engine failed mid-stream for %s", request_id)
                yield _sse(OpenAIError(500, f"Engine error: {exc}", type="server_error",
                                       code="engine_error").body())
            yield _sse("[DONE]")

        def release() -> None:  # however the response ended, never leave the slot held
            if not finished:
                engine.abort(request_id)

        return _SlotReleasingStream(events(), on_close=release, headers=headers)

    from diffvoice.voice.openai_api.completions import add_completions_route

    add_completions_route(router, state, model_ids=model_ids, metrics=api_metrics)
    return router


def served_model_names(state: Any) -> tuple[str, ...]:
    """`--served-model-name` (comma-separated; the API answers to each), or () for the
    engine's own model name."""
    raw = getattr(state.config, "served_model_name", None) or ""
    return tuple(name.strip() for name in raw.split(",") if name.strip())
