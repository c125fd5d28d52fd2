"""The uvicorn settings of `diffvoice serve` (and each `--workers` process): `uvicorn_options`.

Contract: `uvicorn_options(config) -> dict` of `uvicorn.Config` keyword arguments, from a
ServeConfig. What each one bounds (uvicorn 0.55):
- `http`: uvicorn's own HTTP protocol (httptools when installed, else h11) with
  `HeaderTimeoutMixin`: a client has `header_timeout_s` (10 s) from connecting — or, on a kept
  alive connection, from the first byte of its next request — to finish the request line and
  headers; past it the connection is closed without an answer. One peer IP may have at most
  MAX_PENDING_HEADS_PER_IP (32) connections waiting for their head; one more is closed at once,
  so one address cannot fill `limit_concurrency` with half-sent heads. uvicorn itself bounds
  none of this (its keep-alive timer is armed only after a response), so a socket that sends
  nothing, or half a request line, used to stay open for ever.
  A WebSocket upgrade's head counts the same; after the upgrade the app's own
  `handshake_timeout_s` (the first /ws message, Twilio's `start`) and the keepalive pings take
  over. (websockets' `open_timeout` belongs to its own
  server, which uvicorn does not use; the opening handshake is this head plus the app's
  immediate accept.)
- the same protocol classes with `BodyTimeoutMixin`: a request body must be whole
  `body_timeout_s` (15 s) after its head (a trickling or stalled body included); past it the
  request is answered 408 `body_timeout` (or, answered already, its connection closed). One peer
  IP may have at most `max_pending_bodies_per_ip` (16) requests whose body is still arriving; one
  more is answered 429 `too_many_pending_bodies` at once, for that IP only. With the head cap,
  one address can hold at most 32 + 16 connections in these stages, well under
  `limit_concurrency`.
- `timeout_keep_alive` (`keep_alive_timeout_s`, 5 s): an idle kept-alive HTTP connection is
  closed.
- `limit_concurrency` (`max_sessions + connection_headroom`): past that many open connections
  (HTTP ones, idle or half-read, and WebSockets) or running requests, a new HTTP request is
  answered 503 at once instead of queueing; calls keep their own caps (`max_sessions`).
- `h11_max_incomplete_event_size` (16 KiB): the longest request head h11 buffers (httptools'
  parser has its own limit); `ws_max_size` (1 MiB): the longest WebSocket message (1009).
- `ws` / `ws_ping_interval` / `ws_ping_timeout`: voice.transport.keepalive's protocol and pings.
- `proxy_headers` / `forwarded_allow_ips`: off unless `forwarded_allow_ips` is configured
  (uvicorn's own default trusts X-Forwarded-For from 127.0.0.1, where local tunnels connect
  from, so any client could name its own address past every per-IP limit).

Log lines: uvicorn's (`uvicorn.error`: "Exceeded concurrency limit.", "Invalid HTTP request
received.", ...) and this module's pass `LOG_REPEATS`, a `RepeatFilter`: the first line of a
kind, then one line a minute at most, carrying how many were held back.

Knows nothing about the app's routes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 16 * 1024
WS_MAX_SIZE = 1 << 20
MAX_PENDING_HEADS_PER_IP = 32
REFUSED_CLOSE_GRACE_S = 2.0  # a connection refused at connect is closed this long after
LIMIT_KEY = "diffvoice.http_limit"  # set in a request's scope when a limit here answered it
log = logging.getLogger(__name__)


class RepeatFilter(logging.Filter):
    """Lets the first record of a kind (logger and message template) through, then holds the
    repeats back for `window_s` seconds and counts them; the first record of that kind after
    the window carries the count: "... (and 41 more like it in the last 63 s)". A flood of one
    kind is one line a minute."""

    def __init__(self, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.window_s = window_s
        self.clock = clock
        self._kinds: dict[tuple[str, str], list] = {}  # kind -> [window start, held back]
        self._lock = threading.Lock()  # (records come from any thread)

    def reset(self) -> None:
        with self._lock:
            self._kinds.clear()

    def filter(self, record: logging.LogRecord) -> bool:
        kind, now = (record.name, str(record.msg)), self.clock()
        with self._lock:
            seen = self._kinds.get(kind)
            if seen is not None and now - seen[0] < self.window_s:
                seen[1] += 1
                return False
            if len(self._kinds) > 1000:  # kinds are message templates: few; bound it anyway
                self._kinds.clear()
            self._kinds[kind] = [now, 0]
        if seen is not None and seen[1]:
            record.msg = (f"{record.getMessage()} (and {seen[1]} more like it in the last "
                          f"{now - seen[0]:.0f} s)")
            record.args = ()
        return True


LOG_REPEATS = RepeatFilter()
QUIETED_LOGGERS = ("uvicorn.error", __name__, "diffvoice.voice.body_limit")


def quiet_repeated_logs() -> None:
    """Put LOG_REPEATS on uvicorn's error logger and the HTTP limits' own (idempotent)."""
    for name in QUIETED_LOGGERS:
        logger = logging.getLogger(name)
        if LOG_REPEATS not in logger.filters:
            logger.addFilter(LOG_REPEATS)


def error_body(message: str, code: str, kind: str = "invalid_request_error") -> bytes:
    """The OpenAI API's error shape, which every limit here answers with."""
    return json.dumps({"error": {"message": message, "type": kind, "param": None,
                                 "code": code}}).encode()


class HeaderTimeoutMixin:
    """Closes a connection whose request head is not complete `header_timeout_s` after the
    connection opened (or, kept alive, after its next request's first byte); and one peer IP may
    have at most `max_pending_heads_per_ip` connections waiting for their head at once (one more
    is closed at once). Without that cap, one IP holding a few hundred half-sent heads would
    fill uvicorn's `limit_concurrency` (it counts every open connection) and every other
    client's HTTP request would get 503 until the heads timed out. A client that sends its head
    promptly (a browser, an SDK, Twilio, a reverse proxy) has a head pending for microseconds.
    Put it first in the bases of a uvicorn HTTP protocol class."""

    header_timeout_s = 10.0
    max_pending_heads_per_ip = MAX_PENDING_HEADS_PER_IP
    closed = 0  # connections closed for a slow head (process-wide)
    refused = 0  # connections closed at once: their IP had too many heads pending
    _pending: dict[str, int] = {}  # peer IP -> connections waiting for their head (one loop)

    def connection_made(self, transport) -> None:
        self._head_timer: asyncio.TimerHandle | None = None
        peer = transport.get_extra_info("peername")
        self._peer_ip = peer[0] if isinstance(peer, tuple) and peer else None
        super().connection_made(transport)
        self._arm_head_timer()

    def connection_lost(self, exc) -> None:
        self._cancel_head_timer()
        super().connection_lost(exc)

    def _arm_head_timer(self) -> None:
        if self._head_timer is None:
            self._head_timer = self.loop.call_later(self.header_timeout_s, self._head_timed_out)
            ip = self._peer_ip
            if ip is not None:
                pending = HeaderTimeoutMixin._pending
                pending[ip] = pending.get(ip, 0) + 1
                if pending[ip] > self.max_pending_heads_per_ip \
                        and not self.transport.is_closing():
                    HeaderTimeoutMixin.refused += 1
                    self._refuse_head()

    _head_refused = False

    def _refuse_head(self) -> None:
        """Answer 429 without reading the request (the client may have sent it whole: an SDK
        opening 80 connections at once meets this cap as well as a slowloris does), then end
        our half of the connection; what the peer still sends is dropped unread until it hangs
        up (closing over unread data would reset the connection and lose the answer)."""
        self._head_refused = True
        body = error_body(f"too many connections from this address still sending their request "
                          f"head ({self.max_pending_heads_per_ip} at most); retry",
                          "too_many_pending_heads", "rate_limit_error")
        self.transport.write(b"HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json"
                             b"\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(REFUSED_CLOSE_GRACE_S, self.transport.close)
        # nor does it count as one of uvicorn's open connections meanwhile (limit_concurrency)
        self.connections.discard(self)

    def data_received(self, data: bytes) -> None:
        if self._head_refused:
            return  # refused at connect (429 sent): nothing it sends is read
        super().data_received(data)

    def _cancel_head_timer(self) -> None:
        if getattr(self, "_head_timer", None) is not None:
            self._head_timer.cancel()
            self._head_timer = None
            self._unpend()

    def _unpend(self) -> None:
        ip = self._peer_ip
        pending = HeaderTimeoutMixin._pending
        if ip is not None and ip in pending:
            pending[ip] -= 1
            if pending[ip] <= 0:
                del pending[ip]

    def _head_timed_out(self) -> None:
        self._head_timer = None
        self._unpend()
        if not self.transport.is_closing():
            type(self).closed += 1
            self.transport.close()


class BodyTimeoutMixin:
    """Bounds the request body, from the end of its head to its last byte: at most
    `body_timeout_s` (a trickling or stalled body included; then 408 `body_timeout` if nothing
    was answered yet, and the connection is closed either way), and one peer IP may have at
    most `max_pending_bodies_per_ip` requests whose body is still arriving (one more is answered
    429 `too_many_pending_bodies` at once, without reading it). A body sent with its head, as
    SDKs, browsers and Twilio send them, is pending for microseconds. Put it after
    HeaderTimeoutMixin in the bases (it reads `_peer_ip`); the protocol class calls
    `_body_begins(pending)` when a request's head is complete and `_body_ends()` when its body
    is."""

    body_timeout_s = 15.0
    max_pending_bodies_per_ip = 16
    timed_out = 0  # requests cut off for a slow body (process-wide)
    refused = 0  # requests answered 429: their IP had too many bodies pending
    _bodies: dict[str, int] = {}  # peer IP -> requests whose body is still arriving (one loop)

    def connection_made(self, transport) -> None:
        self._body_timer: asyncio.TimerHandle | None = None
        self._refusing = False
        super().connection_made(transport)

    def connection_lost(self, exc) -> None:
        self._body_ends()
        super().connection_lost(exc)

    # uvicorn 0.55 (httptools and h11 alike) reads `self.app` once per request: when its head is
    # complete and it is admitted (not for a WebSocket upgrade, nor past limit_concurrency)
    @property
    def app(self):
        ip = self._peer_ip
        if ip is not None and self._has_body() \
                and BodyTimeoutMixin._bodies.get(ip, 0) >= self.max_pending_bodies_per_ip:
            self._refusing = True
            return self._refuse_body
        return self._app

    @app.setter
    def app(self, app) -> None:
        self._app = app

    def _has_body(self) -> bool:
        for name, value in self.headers or ():
            if name == b"transfer-encoding":
                return True
            if name == b"content-length":
                return value.strip().lstrip(b"0") != b""
        return False

    def _body_begins(self, pending: bool) -> None:
        refusing, self._refusing = self._refusing, False
        if not pending or refusing or self._body_timer is not None:
            return
        self._body_timer = self.loop.call_later(self.body_timeout_s, self._body_timed_out)
        if self._peer_ip is not None:
            bodies = BodyTimeoutMixin._bodies
            bodies[self._peer_ip] = bodies.get(self._peer_ip, 0) + 1

    def _body_ends(self) -> None:
        if getattr(self, "_body_timer", None) is not None:
            self._body_timer.cancel()
            self._body_timer = None
            self._unpend_body()

    def _unpend_body(self) -> None:
        ip, bodies = self._peer_ip, BodyTimeoutMixin._bodies
        if ip is not None and ip in bodies:
            bodies[ip] -= 1
            if bodies[ip] <= 0:
                del bodies[ip]

    def _body_timed_out(self) -> None:
        self._body_timer = None
        self._unpend_body()
        if self.transport.is_closing():
            return
        BodyTimeoutMixin.timed_out += 1
        cycle = self.cycle
        # nothing answered yet, and no earlier response of a pipeline being written
        unanswered = cycle is not None and not cycle.response_started \
            and not getattr(self, "pipeline", None)
        if unanswered:
            self.transport.write(_raw_response(408, "Request Timeout", error_body(
                f"The request body was not complete {self.body_timeout_s:g} s after its "
                "headers (--body-timeout-s).", "body_timeout")))
        if cycle is not None:  # the app's sends are dropped; its receive() says disconnect
            cycle.scope[LIMIT_KEY] = "body_timeout"
            cycle.disconnected = True
            cycle.message_event.set()
        self.transport.close()
        log.warning("%s: request body not complete %g s after its head (--body-timeout-s): %s",
                    self._peer_ip, self.body_timeout_s,
                    "answered 408" if unanswered else "connection closed")

    async def _refuse_body(self, scope, receive, send) -> None:
        """The ASGI app of a request refused for its IP's pending bodies (it reads nothing)."""
        BodyTimeoutMixin.refused += 1
        scope[LIMIT_KEY] = "too_many_pending_bodies"
        log.warning("%s: %d requests still sending their body; one more answered 429 "
                    "(--max-pending-bodies-per-ip)", self._peer_ip, self.max_pending_bodies_per_ip)
        body = error_body(
            f"Too many requests from your address are still sending their body (at most "
            f"{self.max_pending_bodies_per_ip} at once; --max-pending-bodies-per-ip).",
            "too_many_pending_bodies", "rate_limit_error")
        await send({"type": "http.response.start", "status": 429,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _raw_response(status: int, reason: str, body: bytes) -> bytes:
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


def _http_protocol(limits: dict[str, Any]) -> type[asyncio.Protocol]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional: uvicorn then speaks h11
        return type("SlowClientH11Protocol", (SlowClientH11Protocol,), limits)

    class SlowClientHttpToolsProtocol(HeaderTimeoutMixin, BodyTimeoutMixin, HttpToolsProtocol):
        def on_message_begin(self) -> None:  # the first byte of a request
            self._arm_head_timer()
            super().on_message_begin()

        def on_headers_complete(self) -> None:  # also for a WebSocket upgrade
            self._cancel_head_timer()
            cycle = self.cycle
            super().on_headers_complete()
            if self.cycle is not cycle:  # a request cycle (an upgrade makes none)
                self._body_begins(self._has_body())

        def on_message_complete(self) -> None:
            self._body_ends()
            super().on_message_complete()

    for name, value in limits.items():
        setattr(SlowClientHttpToolsProtocol, name, value)
    return SlowClientHttpToolsProtocol


class SlowClientH11Protocol(HeaderTimeoutMixin, BodyTimeoutMixin, H11Protocol):
    """h11 has no head or body callbacks: a new request cycle means its head was complete, and
    its body is pending while h11 says the client is sending one."""

    def data_received(self, data: bytes) -> None:
        if self._head_refused:
            return  # refused at connect (429 sent): nothing it sends is read
        if (self.cycle is None or self.cycle.response_complete) \
                and self.conn.their_state is not h11.SEND_BODY:  # (answered before its body)
            self._arm_head_timer()  # waiting for (the rest of) a new request's head
        cycle = self.cycle
        super().data_received(data)
        self._after_parsing(cycle)

    def on_response_complete(self) -> None:
        # the next request may have begun already (pipelined, or half of one): h11 parses it
        # only here, with no data_received; its head clock then runs from this response's end
        cycle, begun = self.cycle, bool(self.conn.trailing_data[0])
        super().on_response_complete()
        if begun and self.cycle is cycle and not self.transport.is_closing():
            self._arm_head_timer()
        self._after_parsing(cycle)

    def _after_parsing(self, cycle) -> None:
        if self.cycle is not cycle:
            self._cancel_head_timer()
            self._body_begins(self.conn.their_state is h11.SEND_BODY)
        elif self.conn.their_state is not h11.SEND_BODY:
            self._body_ends()

    def handle_websocket_upgrade(self, event) -> None:
        self._cancel_head_timer()
        super().handle_websocket_upgrade(event)



def uvicorn_options(config, *, http: str | None = None) -> dict[str, Any]:
    """`uvicorn.Config` keyword arguments for `config` (a ServeConfig); `http="h11"` forces the
    h11 protocol (tests). Also puts LOG_REPEATS on the loggers (`quiet_repeated_logs`), so every
    entry point that starts uvicorn with these options (`diffvoice serve`, each `--workers`
    process) logs the same way."""
    from diffvoice.voice.transport.keepalive import KeepaliveWebSocketProtocol

    limits = {"header_timeout_s": float(config.header_timeout_s),
              "body_timeout_s": float(getattr(config, "body_timeout_s", 15.0)),
              "max_pending_bodies_per_ip": int(getattr(config, "max_pending_bodies_per_ip", 16))}
    protocol = (type("SlowClientH11Protocol", (SlowClientH11Protocol,), limits)
                if http == "h11" else _http_protocol(limits))
    trusted = list(getattr(config, "forwarded_allow_ips", ()) or ())
    quiet_repeated_logs()
    return {
        "log_level": "warning",
        "log_config": None,  # uvicorn's records go through the process's one format (voice.app)
        "http": protocol,
        "timeout_keep_alive": config.keep_alive_timeout_s,
        "limit_concurrency": config.max_sessions + config.connection_headroom,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES,
        "ws": KeepaliveWebSocketProtocol,
        "ws_max_size": WS_MAX_SIZE,
        # PCM and mu-law audio do not compress: per-message deflate only costs CPU on the
        # event loop (measured under py-spy: ~1% of the loop per call)
        "ws_per_message_deflate": False,
        "ws_ping_interval": config.ws_ping_interval_s or None,
        "ws_ping_timeout": config.ws_ping_timeout_s or None,
        # X-Forwarded-For / -Proto only from the configured proxies; none by default
        "proxy_headers": bool(trusted),
        "forwarded_allow_ips": trusted or None,
    }
