"""ASGI middleware that refuses HTTP request bodies over a byte limit with 413, before reading
them whole.

Contract: `BodyLimitMiddleware(app, max_bytes=..., path_limits={prefix: bytes})` wraps an ASGI
app. For each HTTP request the limit is the first `path_limits` prefix that matches the path,
else `max_bytes`. A `Content-Length` above the limit (or one that is not a number) is answered
413 / 400 at once, without reading a byte of the body; a body sent without a length (chunked)
is counted as it streams in and the request is answered 413 as soon as it passes the limit (the
app's `receive()` raises, so the handler never sees a partial body). The response is JSON
`{"error": {"message", "type": "invalid_request_error", "code": "request_too_large"}}`, the
OpenAI API's shape. A client that hangs up before its whole body arrived (the handler's body read
raises starlette's ClientDisconnect) is one short warning line, no traceback (issue 54 N10: a
70-line traceback per such request), and none at all when voice.http_limits cut it off (it logs
its own); the repeats are collapsed by voice.http_limits.LOG_REPEATS. WebSocket and lifespan
traffic pass through untouched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from diffvoice.voice.http_limits import LIMIT_KEY

log = logging.getLogger(__name__)


class _TooLarge(Exception):
    pass


def _error(status: int, message: str, code: str) -> tuple[int, bytes]:
    body = {"error": {"message": message, "type": "invalid_request_error", "param": None,
                      "code": code}}
    return status, json.dumps(body).encode()


class BodyLimitMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int = 1 << 20,
                 path_limits: Mapping[str, int] | None = None) -> None:
        self.app = app
        self.max_bytes = int(max_bytes)
        self.path_limits = dict(path_limits or {})

    def limit_for(self, path: str) -> int:
        for prefix, limit in self.path_limits.items():
            if path.startswith(prefix):
                return limit
        return self.max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.limit_for(scope.get("path", ""))
        length = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                length = value
                break
        if length is not None:
            try:
                declared = int(length)
            except ValueError:
                await self._respond(send, *_error(400, "Content-Length is not a number.",
                                                  "invalid_content_length"))
                return
            if declared > limit:
                await self._respond(send, *self._too_large(limit))
                return
        seen = 0
        started = False

        async def counting_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > limit:
                    raise _TooLarge
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counting_receive, tracking_send)
        except _TooLarge:
            if not started:
                await self._respond(send, *self._too_large(limit))
        except ClientDisconnect:  # nobody to answer
            if LIMIT_KEY not in scope:
                client = scope.get("client") or ("?",)
                log.warning("%s: client hung up before sending its whole body (%d bytes "
                            "came) of %s %s", client[0], seen, scope.get("method"),
                            scope.get("path", "")[:100])

    @staticmethod
    def _too_large(limit: int) -> tuple[int, bytes]:
        return _error(413, f"The request body is larger than this server accepts ({limit} "
                           "bytes).", "request_too_large")

    @staticmethod
    async def _respond(send: Send, status: int, body: bytes) -> None:
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})
