"""The voice server's FastAPI app: `create_app(state: AppState) -> FastAPI`.

Routes:
  GET  /healthz   JSON: status, model, asr, tts, active sessions, engine stats, warnings
  GET  /metrics   Prometheus text (voice.metrics.VoiceMetrics.render)
  WS   /ws        one browser call per connection (transport.ws_session; docs/protocol.md)
  GET  /...       the static page in `config.web_dir` (index.html at /)

With `config.api_only` only /healthz and /metrics are served (callers mount the OpenAI router).
The static mount is appended when the app starts (lifespan), after every router a caller added
with `app.include_router(...)` — a catch-all "/" mount added earlier would shadow them.

The app does not own the engine: whoever built `state` closes it. Knows nothing about pipecat
beyond handing sockets to voice.transport.ws_session.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, WebSocket
from fastapi.responses import JSONResponse, Response
from loguru import logger
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

from voice.state import AppState


def _engine_stats(state: AppState) -> dict:
    try:
        return dict(state.engine.stats()) if state.engine is not None else {}
    except Exception as e:
        return {"error": repr(e)}


def create_app(state: AppState) -> FastAPI:
    config = state.config
    _self_description()  # once, now (it may run nvidia-smi / git), not in a request

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if not config.api_only:
            web_dir = Path(config.web_dir)
            if (web_dir / "index.html").is_file():
                app.router.routes.append(
                    Mount("/", app=StaticFiles(directory=web_dir, html=True), name="web")
                )
            else:
                logger.warning(f"no {web_dir}/index.html: the browser page is not served")
        yield

    app = FastAPI(title="diffvoice", lifespan=lifespan)
    app.state.diffvoice = state

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse(
            {
                "status": "ok",
                "model": state.model_name,
                "asr": getattr(state.asr, "name", None),
                "tts": getattr(state.tts, "name", None),
                "output_sample_rate": getattr(state.tts, "sample_rate", None),
                "stop_secs": config.stop_secs,
                "active_sessions": len(state.active_sessions),
                "max_sessions": config.max_sessions,
                "engine": _engine_stats(state),
                "warnings": state.warnings,
                "replica": state.replica_id,
                # what this server runs on, so a load generator elsewhere (bench --url) can
                # report the server's machine rather than its own
                **_self_description(),
            }
        )

    @app.get("/metrics")
    async def metrics() -> Response:
        body, content_type = state.metrics.render()
        return Response(content=body, media_type=content_type)

    if not config.api_only:
        from voice.transport.ws_session import serve_browser_session

        @app.websocket("/ws")
        async def ws(websocket: WebSocket) -> None:
            await serve_browser_session(websocket, state)

    return app


_DESCRIPTION: dict = {}


def _self_description() -> dict:
    """{"machine": {...}, "versions": {...}} of this process, computed once."""
    if not _DESCRIPTION:
        from latency_bench.machine import git_revision, machine_info, package_versions

        _DESCRIPTION.update(machine=machine_info(),
                            versions={**package_versions(), "git": git_revision()})
    return dict(_DESCRIPTION)
