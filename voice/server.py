"""The voice server's FastAPI app: `create_app(state: AppState) -> FastAPI`.

Routes:
  GET  /healthz   JSON: status, model, asr, tts, active sessions, engine stats, warnings; 503
                  {"status": "warming", "reason"} until the call path is warm (voice.warmup:
                  one answer served at start-up, so the first caller waits no longer than later
                  ones)
  GET  /agent     JSON: the model, and the business and example questions of its fact sheet
                  (with --api-keys and without a bearer key: only {"status": "ok"})
  GET  /metrics   Prometheus text (voice.metrics.VoiceMetrics.render); with --api-keys it needs
                  a bearer key unless --public-metrics
  POST /session-token  {"token", "expires_at", "expires_in"}: a short-lived /ws credential
                  (bearer key required when --api-keys is set; voice.access.SessionTokens)
  WS   /ws        one browser call per connection (transport.ws_session; docs/protocol.md)
  WS   /v1/realtime?model=  one OpenAI-Realtime session per connection (realtime.session;
                  docs/realtime.md)
  GET  /...       the static page in `config.web_dir` (index.html at /)

With `config.api_only` only /healthz and /metrics are served (callers mount the OpenAI router).
The static mount is appended when the app starts (lifespan), after every router a caller added
with `app.include_router(...)` — a catch-all "/" mount added earlier would shadow them.

Every HTTP request body is capped (voice.body_limit: `max_body_bytes`, `max_form_bytes` under
/telephony/; 413 past it). Under /v1/ (voice.api_guard): a POST that is not application/json
gets 415 and, without --api-keys, a request from a browser page whose Origin is not allowed
(voice.access.allowed_origins) gets 403. Without --api-keys, every route (HTTP and WebSocket)
refuses a Host header that is not localhost, an IP address, --host, the --public-url host or one
of --allowed-hosts (voice.api_guard.HostGuardMiddleware: 421, a WebSocket 403 before accept). With
--api-keys, /docs and /openapi.json are not served.

The app does not own the engine: whoever built `state` closes it. Knows nothing about pipecat
beyond handing sockets to voice.transport.ws_session.
"""

from __future__ import annotations

import asyncio
import gc
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, Request, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from diffvoice.voice.access import allowed_hosts, allowed_origins, bearer_token, key_matches
from diffvoice.voice.api_guard import ApiGuardMiddleware, HostGuardMiddleware
from diffvoice.voice.body_limit import BodyLimitMiddleware
from diffvoice.voice.http_limits import quiet_repeated_logs
from diffvoice.voice.machine import git_revision, machine_info, package_versions
from diffvoice.voice.state import AppState


def _engine_stats(state: AppState) -> dict:
    try:
        return dict(state.engine.stats()) if state.engine is not None else {}
    except Exception as e:
        return {"error": repr(e)}


def _request_ids(state: AppState) -> list[str]:
    """Engine requests in flight (ids name their session: voice-<session_id>-<n>); lets a test
    harness see that an interrupted or closed call's request is gone."""
    try:
        return sorted(state.engine.active_request_ids()) if state.engine is not None else []
    except Exception:
        return []


def _task_names() -> dict[str, int]:
    """asyncio tasks alive, by coroutine name (leak hunting: what outlived its session?)."""
    import asyncio
    from collections import Counter

    names = Counter(getattr(t.get_coro(), "__qualname__", "?") for t in asyncio.all_tasks())
    return dict(names.most_common(15))


def _keepalive_counts() -> dict[str, int]:
    """Late keepalive pongs forgiven (the peer kept sending) and sockets closed
    keepalive_timeout (nothing came), since start (voice.transport.keepalive)."""
    from diffvoice.voice.transport.keepalive import KeepaliveWebSocketProtocol as K

    return {"late_pongs_forgiven": K.spared, "closed_keepalive_timeout": K.closed}


def create_app(state: AppState) -> FastAPI:
    config = state.config
    _self_description()  # once, now (it may run nvidia-smi / git), not in a request

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        watchdog = None
        if getattr(config, "loop_stall_log_ms", 0):
            from diffvoice.voice.loop_watchdog import LoopWatchdog

            watchdog = LoopWatchdog(asyncio.get_running_loop(),
                                    config.loop_stall_log_ms / 1000.0).start()
        from diffvoice.voice import task_dump

        task_dump.install(asyncio.get_running_loop())  # kill -USR1: where every task waits
        from diffvoice.voice.loop_lag import LoopLag

        state.loop_lag = LoopLag().start()  # /metrics: diffvoice_event_loop_lag_seconds
        from diffvoice.voice.warmup import warm_up

        warming = None if state.readiness.ready else asyncio.get_running_loop().create_task(
            warm_up(state), name="warm-up")  # (a Ray replica warmed up before serving)
        if not config.api_only:
            web_dir = Path(config.web_dir)
            if (web_dir / "index.html").is_file():
                app.router.routes.append(
                    Mount("/", app=StaticFiles(directory=web_dir, html=True), name="web")
                )
            else:
                logger.warning(f"no {web_dir}/index.html: the browser page is not served")
        yield
        if warming is not None:
            warming.cancel()
        gc.unfreeze()  # the warm-up's gc.freeze(): collectable again, as the process winds down
        state.loop_lag.stop()
        if watchdog is not None:
            watchdog.stop()

    locked = bool(getattr(config, "api_keys", ())) and not getattr(config, "public_metrics", False)
    docs = {} if not getattr(config, "api_keys", ()) else {
        "docs_url": None, "redoc_url": None, "openapi_url": None}
    app = FastAPI(title="diffvoice", lifespan=lifespan, **docs)
    app.state.diffvoice = state
    app.add_middleware(
        BodyLimitMiddleware,
        max_bytes=getattr(config, "max_body_bytes", 1 << 20),
        path_limits={"/telephony/": getattr(config, "max_form_bytes", 64 << 10)},
    )
    app.add_middleware(  # cross-site /v1 requests never reach a route or a body read
        ApiGuardMiddleware, allowed_origins=allowed_origins(config),
        api_keys=tuple(getattr(config, "api_keys", ()) or ()),
    )
    app.add_middleware(  # outermost: no route answers a foreign Host (DNS rebinding)
        HostGuardMiddleware, allowed_hosts=allowed_hosts(config),
        api_keys=tuple(getattr(config, "api_keys", ()) or ()),
    )
    quiet_repeated_logs()  # (also where uvicorn_options is not used: Ray Serve replicas)

    def has_key(request: Request) -> bool:
        token = bearer_token(request.headers)
        return token is not None and key_matches(token, tuple(config.api_keys))

    @app.post("/session-token")
    async def session_token(request: Request) -> JSONResponse:
        """A short-lived /ws credential for pages (`/ws?token=...`); needs a bearer API key."""
        if config.api_keys and not has_key(request):
            return JSONResponse({"error": {"message": "Missing or invalid bearer API key.",
                                           "type": "invalid_request_error", "param": None,
                                           "code": "invalid_api_key"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        token, expires_at = state.session_tokens.issue()
        return JSONResponse({"token": token, "expires_at": expires_at,
                             "expires_in": state.session_tokens.ttl_s})

    from diffvoice.agent.card import agent_card

    card = agent_card(config.model)

    @app.get("/agent")
    async def agent() -> JSONResponse:
        """Who the page talks to: the model and, from its fact sheet, the business and three
        example questions (agent.card); public, like the page."""
        return JSONResponse({"model": state.model_name, **(card or {"examples": []})})

    @app.get("/healthz")
    async def healthz(request: Request) -> JSONResponse:
        ready = state.readiness.ready
        code = 200 if ready else 503  # not ready until the call path is warm (voice.warmup)
        status = {"status": "ok"} if ready else {"status": "warming",
                                                 "reason": state.readiness.reason}
        if locked and not has_key(request):
            return JSONResponse(status, status_code=code)  # readiness only; details need a key
        return JSONResponse(
            {
                **status,
                "warm_up": state.readiness.as_dict(),
                "model": state.model_name,
                "asr": getattr(state.asr, "name", None),
                "tts": getattr(state.tts, "name", None),
                "output_sample_rate": getattr(state.tts, "sample_rate", None),
                "stop_secs": config.stop_secs,
                "vad_min_volume": config.vad_min_volume,
                "active_sessions": len(state.active_sessions),
                "max_sessions": config.max_sessions,
                "engine": _engine_stats(state),
                "engine_request_ids": _request_ids(state),
                "event_loop_tasks": _task_names(),
                "ws_keepalive": _keepalive_counts(),
                "warnings": state.warnings,
                "replica": state.replica_id,
                # what this server runs on, so a load generator elsewhere (bench --url) can
                # report the server's machine rather than its own
                **_self_description(),
            },
            status_code=code,
        )

    @app.get("/metrics")
    async def metrics(request: Request) -> Response:
        if locked and not has_key(request):
            return Response("metrics need 'Authorization: Bearer <API key>'\n", status_code=401,
                            headers={"WWW-Authenticate": "Bearer"}, media_type="text/plain")
        state.metrics.observe_server(state)
        body, content_type = state.metrics.render()
        return Response(content=body, media_type=content_type)

    if not config.api_only:
        from diffvoice.voice.transport.ws_session import serve_browser_session

        @app.websocket("/ws")
        async def ws(websocket: WebSocket) -> None:
            await serve_browser_session(websocket, state)

        from diffvoice.voice.realtime.session import serve_realtime_session

        @app.websocket("/v1/realtime")
        async def realtime(websocket: WebSocket) -> None:
            await serve_realtime_session(websocket, state)

    return app


_DESCRIPTION: dict = {}


def _self_description() -> dict:
    """{"machine": {...}, "versions": {...}} of this process, computed once."""
    if not _DESCRIPTION:
        _DESCRIPTION.update(machine=machine_info(),
                            versions={**package_versions(), "git": git_revision()})
    return dict(_DESCRIPTION)
