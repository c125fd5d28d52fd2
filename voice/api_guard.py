"""ASGI middleware that keeps web pages of other sites away from the OpenAI-compatible API.

Why: a browser lets any page send a "simple" cross-site POST (Content-Type text/plain, a form
type, or none at all) without asking the server first (no CORS preflight), and DNS rebinding
lets a foreign page reach a local server under its own name. With no `--api-keys` (the default),
that put a developer's local /v1 within reach of every web page they visit.

Contract: `ApiGuardMiddleware(app, allowed_origins=(...), api_keys=(...), prefix="/v1/")` wraps
an ASGI app. For each HTTP request whose path starts with `prefix` (everything else, WebSocket
and lifespan traffic pass untouched), answered before a byte of the body is read:
- with no `api_keys`, a request carrying an `Origin` header that
  `voice.access.origin_allowed(origin, allowed_origins)` refuses gets **403**
  (`origin_not_allowed`); requests without `Origin` (curl, SDKs, servers) pass. With API keys the
  bearer key is the guard (a browser cannot send it cross-site without a preflight, which this
  server does not grant);
- a POST whose Content-Type is not `application/json` (parameters such as `; charset=utf-8`
  allowed; a missing Content-Type counts as not JSON) gets **415** (`unsupported_media_type`).
Both answers are OpenAI-shaped JSON: `{"error": {"message", "type": "invalid_request_error",
"param": null, "code"}}`.

`HostGuardMiddleware(app, allowed_hosts=(...), api_keys=(...))`: the DNS rebinding guard for
**every** route (issue 54 N11: a foreign page read /healthz, /metrics and /openapi.json under its
own name). With no `api_keys`, an HTTP request whose `Host` header
`voice.access.host_allowed(host, allowed_hosts)` refuses gets **421** (`host_not_allowed`, the
same JSON shape) and a WebSocket upgrade is closed before it is accepted (the client sees HTTP
403). With API keys, the key is the guard, as for Origin.

Knows nothing about the routes behind it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Receive, Scope, Send

from diffvoice.voice.access import host_allowed, origin_allowed

JSON_TYPE = "application/json"


def _error(status: int, message: str, code: str, param: str | None = None) -> bytes:
    return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                 "param": param, "code": code}}).encode()


def is_json(content_type: str | None) -> bool:
    """Whether a Content-Type header value names JSON (`application/json`, any parameters)."""
    return bool(content_type) and content_type.split(";", 1)[0].strip().lower() == JSON_TYPE


class ApiGuardMiddleware:
    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = (),
                 api_keys: Iterable[str] = (), prefix: str = "/v1/") -> None:
        self.app = app
        self.allowed_origins = tuple(allowed_origins)
        self.api_keys = tuple(api_keys)
        self.prefix = prefix

    def refusal(self, scope: Scope) -> tuple[int, bytes] | None:
        """(status, body) for a request that must be refused, else None."""
        headers = {}
        for name, value in scope.get("headers", ()):
            if name in (b"origin", b"content-type"):
                headers.setdefault(name, value.decode("latin-1"))
        origin = headers.get(b"origin")
        if not self.api_keys and not origin_allowed(origin, self.allowed_origins):
            return 403, _error(403, f"Origin {origin[:100]!r} may not call this API (a web "
                                    "page of another site; see --allowed-origins).",
                               "origin_not_allowed")
        content_type = headers.get(b"content-type")
        if scope.get("method") == "POST" and not is_json(content_type):
            shown = "none" if content_type is None else repr(content_type[:100])
            return 415, _error(415, f"Content-Type must be {JSON_TYPE} (got {shown}).",
                               "unsupported_media_type", "Content-Type")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith(self.prefix):
            await self.app(scope, receive, send)
            return
        refused = self.refusal(scope)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, body = refused
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class HostGuardMiddleware:
    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] = (),
                 api_keys: Iterable[str] = ()) -> None:
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.on = not tuple(api_keys) and "*" not in self.allowed_hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = None
        if self.on and scope["type"] in ("http", "websocket"):
            for name, value in scope.get("headers", ()):
                if name == b"host":
                    host = value.decode("latin-1")
                    break
        if host is None or host_allowed(host, self.allowed_hosts):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # before accept: the client's handshake gets 403
            await send({"type": "websocket.close", "code": 1008, "reason": "host_not_allowed"})
            return
        body = _error(421, f"Host {host[:100]!r} is not a name this server answers to (a page "
                           "of another site under DNS rebinding?); add it with --allowed-hosts.",
                      "host_not_allowed", "Host")
        await send({"type": "http.response.start", "status": 421,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
