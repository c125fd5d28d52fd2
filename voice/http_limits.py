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
- `timeout_keep_alive` (`keep_alive_timeout_s`, 5 s): an idle kept-alive HTTP connection is
  closed.
- `limit_concurrency` (`max_sessions + connection_headroom`): past that many open connections
  (HTTP ones, idle or half-read, and WebSockets) or running requests, a new HTTP request is
  answered 503 at once instead of queueing; calls keep their own caps (`max_sessions`).
- `h11_max_incomplete_event_size` (16 KiB): the longest request head h11 buffers (httptools'
  parser has its own limit); `ws_max_size` (1 MiB): the longest WebSocket message (1009).
- `ws` / `ws_ping_interval` / `ws_ping_timeout`: voice.transport.keepalive's protocol and pings.

Knows nothing about the app's routes.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_HEAD_BYTES = 16 * 1024
WS_MAX_SIZE = 1 << 20
MAX_PENDING_HEADS_PER_IP = 32


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
                    self.transport.close()

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


def _http_protocol(header_timeout_s: float) -> type[asyncio.Protocol]:
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # httptools is optional: uvicorn then speaks h11
        return type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,),
                    {"header_timeout_s": header_timeout_s})

    class HeaderTimeoutHttpToolsProtocol(HeaderTimeoutMixin, HttpToolsProtocol):
        def on_message_begin(self) -> None:  # the first byte of a request
            self._arm_head_timer()
            super().on_message_begin()

        def on_headers_complete(self) -> None:  # also for a WebSocket upgrade
            self._cancel_head_timer()
            super().on_headers_complete()

    HeaderTimeoutHttpToolsProtocol.header_timeout_s = header_timeout_s
    return HeaderTimeoutHttpToolsProtocol


class HeaderTimeoutH11Protocol(HeaderTimeoutMixin, H11Protocol):
    """h11 has no head callbacks: a new request cycle means its head was complete."""

    def data_received(self, data: bytes) -> None:
        if self.cycle is None or self.cycle.response_complete:
            self._arm_head_timer()  # waiting for (the rest of) a new request's head
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:
            self._cancel_head_timer()

    def on_response_complete(self) -> None:
        # the next request may have begun already (pipelined, or half of one): h11 parses it
        # only here, with no data_received; its head clock then runs from this response's end
        cycle, begun = self.cycle, bool(self.conn.trailing_data[0])
        super().on_response_complete()
        if begun and self.cycle is cycle and not self.transport.is_closing():
            self._arm_head_timer()

    def handle_websocket_upgrade(self, event) -> None:
        self._cancel_head_timer()
        super().handle_websocket_upgrade(event)


def uvicorn_options(config, *, http: str | None = None) -> dict[str, Any]:
    """`uvicorn.Config` keyword arguments for `config` (a ServeConfig); `http="h11"` forces the
    h11 protocol (tests)."""
    from diffvoice.voice.transport.keepalive import KeepaliveWebSocketProtocol

    header_timeout_s = float(config.header_timeout_s)
    protocol = (type("HeaderTimeoutH11Protocol", (HeaderTimeoutH11Protocol,),
                     {"header_timeout_s": header_timeout_s}) if http == "h11"
                else _http_protocol(header_timeout_s))
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
    }
