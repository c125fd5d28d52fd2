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
- Live calls first: every /v1 request is counted before any work is done (its prompt's cost,
  engine.requests.prompt_chars, against max_prompt_chars: 400; its client's concurrency and
  token budget, client_limits: 429), runs at engine priority API_PRIORITY (behind live call
  turns, which keep EngineConfig.reserved_slots; 429 when the API's share is full), and its host
  work (the agent's rules, the dropped-context check) runs on this router's own API_THREADS
  threads, never on the event loop nor on the default executor the calls use.
Knows nothing about the voice pipeline; request parsing lives in `request.py`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from diffvoice.agent import pipeline
from diffvoice.agent.guard import ClarifyRecord
from diffvoice.agent.pipeline import Agent
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
    _OpenAIRoute,
    _SlotReleasingStream,
    _sse,
    _tool_call,
    _tool_call_deltas,
    _unless_disconnected,
    _usage,
    counted,
)
from diffvoice.voice.openai_api.completions import add_completions_route
from diffvoice.voice.openai_api.metrics import api_metrics_for
from diffvoice.voice.openai_api.request import (
    ChatRequest,
    OpenAIError,
    parse_chat_request,
)
from diffvoice.voice.receptionist.setup import agent_of

log = logging.getLogger(__name__)

API_THREADS = 2  # threads for the API's request-sized host work

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
        kinds = frozenset(dropped)
        # a property of the model, not of the request: a WARNING the first time a kind of
        # message is left out, DEBUG after that (each response says it in its header)
        level = logging.DEBUG if kinds <= _DROPPED_WARNED else logging.WARNING
        _DROPPED_WARNED.update(kinds)
        log.log(level, "%s: the model's chat template ignores %s message(s) (%s); see "
                "docs/openai-api.md (logged at WARNING once per kind)", request_id,
                sum(dropped.values()), text)
    return text


_DROPPED_WARNED: set[str] = set()


def _agent_for(state: Any, chat: ChatRequest) -> tuple[Any, ClarifyRecord | None]:
    """(the server's agent as it applies to this chat request, the record of its AFTER rules
    or None): its BEFORE rules for every chat request, its AFTER rules (the clarify guard) for
    spoken answers only (no response_format), and not for `ignore_eos` requests, which ask for
    exactly max_tokens raw tokens (benchmarks at equal answer length: such a reply is cut, not
    blended)."""
    if not hasattr(state, "config"):
        return None, None
    agent = agent_of(state)
    if agent.guard is None:
        return agent, None
    if chat.params.response_format is not None or chat.params.ignore_eos:
        return Agent(before=agent.before), None
    return agent, ClarifyRecord()


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
    limits, api_pool = api_limits(state)
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
        ids, defaults = model_ids(), _default_params(state)
        return await counted(
            request, state, limits, api_pool, engine,
            lambda body: parse_chat_request(body, model_ids=ids, defaults=defaults),
            lambda chat: chat.messages, lambda chat, lease: _chat(request, chat, lease))

    async def _chat(request: Request, chat: ChatRequest, lease: Lease) -> Response:
        chat, served_tools = _served_tools(state, chat)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        created = int(time.time())
        agent, record = _agent_for(state, chat)
        deltas = pipeline.serve(  # the agent's rules around the model (agent.pipeline)
            agent, engine, list(chat.messages), chat.params, request_id=request_id,
            record=record, chat_template_kwargs=chat.chat_template_kwargs,
            priority=API_PRIORITY, pool=api_pool, client=lease.key)
        dropped = await asyncio.get_running_loop().run_in_executor(
            api_pool, _dropped_context, engine, chat.messages, request_id)
        if chat.stream:
            return await _stream(request, chat, deltas, request_id, created,
                                 {SERVED_TOOLS_HEADER: "served"} if served_tools else {},
                                 lease)
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
        if record is not None and record.clarified:
            headers["x-diffvoice-clarified"] = record.reason
        if record is not None and record.grounding:
            headers["x-diffvoice-grounded"] = record.grounding
        if record is not None and record.retried:
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
                      request_id: str, created: int, headers: dict[str, str],
                      lease: Lease) -> Response:
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
            lease.release()
            if not finished:
                engine.abort(request_id)

        return _SlotReleasingStream(events(), on_close=release, headers=headers)

    add_completions_route(router, state, model_ids=model_ids, metrics=api_metrics,
                          limits=limits, pool=api_pool)
    return router


def api_limits(state: Any) -> tuple[ClientLimits, concurrent.futures.ThreadPoolExecutor]:
    """The server's one ClientLimits and API thread pool (made on first use, kept on `state`:
    the chat and completions routes share them)."""
    made = getattr(state, "_api_limits", None)
    if made is None:
        config = getattr(state, "config", None)
        made = (ClientLimits(getattr(config, "api_client_concurrency", 0) or 0,
                             getattr(config, "api_client_tokens_per_min", 0) or 0),
                concurrent.futures.ThreadPoolExecutor(API_THREADS,
                                                      thread_name_prefix="diffvoice-api"))
        try:
            state._api_limits = made
        except AttributeError:  # a state that takes no attributes: per router
            pass
    return made


def served_model_names(state: Any) -> tuple[str, ...]:
    """`--served-model-name` (comma-separated; the API answers to each), or () for the
    engine's own model name."""
    raw = getattr(state.config, "served_model_name", None) or ""
    return tuple(name.strip() for name in raw.split(",") if name.strip())
