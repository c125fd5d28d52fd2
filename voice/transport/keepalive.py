"""WebSocket keepalive that never closes a caller for being slow: uvicorn's protocol, with a
pong timeout that only ends a connection whose peer went silent.

uvicorn's keepalive (`ws_ping_interval` / `ws_ping_timeout`) closes a connection with **1011**
"keepalive ping timeout" whenever a pong is late — also when the peer kept sending audio all
along and only its pong was late (a starved client, a slow network), or when the *server* had
stopped reading the socket (uvicorn pauses reading while the app is behind, so a pong that
arrived is not seen). 1011 means "server bug" in docs/protocol.md; none of these is one.

Contract: `KeepaliveWebSocketProtocol` is uvicorn's sans-I/O WebSocket protocol (what `ws="auto"`
picks) with one change at the pong deadline (`ping_timeout` seconds after a keepalive ping):
- if any bytes came from the peer since that ping, or reading was paused by the server (it
  cannot tell), the peer is alive: the late pong is forgiven and the next ping is scheduled
  (counted in `KeepaliveWebSocketProtocol.spared`);
- otherwise nothing at all came for `ping_timeout` s after the ping: the connection is closed
  with **1008** and reason `keepalive_timeout` (documented in docs/protocol.md; counted in
  `KeepaliveWebSocketProtocol.closed`). The application then sees a disconnect as for any
  vanished client.
A text frame that is not valid UTF-8 is closed with **1007** as uvicorn does, but logged as one
WARNING line on `uvicorn.error` (client address, byte count), not uvicorn's ERROR with a full
traceback per frame (issue 39: 136 tracebacks in one fuzz run); the app sees a disconnect.
Every frame from the peer (text, binary, continuation fragments, pings, pongs) is counted
against a message rate (voice.transport.message_rate, issue 54 N5): past it the connection is
closed **1008** `message_rate` at once, frames already parsed but not yet read by the app are
dropped, and the app sees a disconnect (counted in `KeepaliveWebSocketProtocol.flooded`). The
counter is in the ASGI scope's extensions under `message_rate.SCOPE_KEY`, so the app can set
the server's `ws_message_rate` / `ws_message_burst` once it has accepted (`limit_socket`);
until then the module defaults apply.
Pass the class as `uvicorn.run(..., ws=KeepaliveWebSocketProtocol)`; `ws_ping_interval=None`
turns keepalive pings off, `ws_ping_timeout=None` sends pings but never times out. The idle
timeout (`idle_timeout_s`, no caller audio) stays the documented reaper of quiet calls.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from diffvoice.voice.transport import message_rate

KEEPALIVE_CLOSE_CODE = 1008
FLOOD_CLOSE_GRACE_S = 2.0  # a flooding peer has this long to read our close and hang up
KEEPALIVE_CLOSE_REASON = "keepalive_timeout"


class KeepaliveWebSocketProtocol(WebSocketsSansIOProtocol):
    spared = 0  # late pongs forgiven because the peer was sending (process-wide counters)
    closed = 0  # connections closed keepalive_timeout
    flooded = 0  # connections closed message_rate
    _flood_closed = False  # this connection was: its frames are dropped from then on

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.last_received_at = 0.0  # loop time of the last bytes from the peer
        self.message_rate = message_rate.MessageRate()

    def handle_connect(self, event) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)  # absent when the upgrade was refused
        if scope is not None:
            scope["extensions"][message_rate.SCOPE_KEY] = self.message_rate

    def _over_rate(self) -> bool:
        """Count one frame; True (and the connection failed 1008 message_rate) past the rate.
        After that close every frame is dropped unread."""
        if self._flood_closed:
            return True
        if self.message_rate.admit():
            return False
        if not (self.close_sent or self.transport.is_closing()):
            type(self).flooded += 1
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
            self.logger.warning("%s - WebSocket closed 1008 message_rate: %s", client,
                                self.message_rate.describe())
            kept = []  # what the app has not read yet is dropped: it would only be more load
            while not self.queue.empty():
                queued = self.queue.get_nowait()
                if queued["type"] != "websocket.receive":
                    kept.append(queued)
            for queued in kept:
                self.queue.put_nowait(queued)
            self.frames = []
            self.queue.put_nowait({"type": "websocket.disconnect",
                                   "code": message_rate.CLOSE_CODE,
                                   "reason": message_rate.CLOSE_REASON})
            self.conn.fail(message_rate.CLOSE_CODE, message_rate.CLOSE_REASON)
            # the close frame, then our half of the TCP connection (the b"" marker); reading
            # goes on (dropped) until the peer closes its half: closing the socket with the
            # flood still unread would send a reset, and the peer would lose the close frame
            # (it saw 1006, no reason)
            for data in self.conn.data_to_send():
                if data:
                    self.transport.write(data)
                elif self.transport.can_write_eof():
                    self.transport.write_eof()
            self.close_sent = True
            self._flood_closed = True
            # uvicorn closes the socket when the app returns unless a close timer runs: this
            # one gives the peer its grace (connection_lost cancels it)
            if self.close_timer is not None:
                self.close_timer.cancel()
            self.close_timer = self.loop.call_later(FLOOD_CLOSE_GRACE_S, self.transport.close)
        return True

    def handle_text(self, event) -> None:
        if not self._over_rate():
            super().handle_text(event)

    def handle_bytes(self, event) -> None:
        if not self._over_rate():
            super().handle_bytes(event)

    def handle_cont(self, event) -> None:
        if not self._over_rate():
            super().handle_cont(event)

    def handle_ping(self) -> None:
        if not self._over_rate():
            super().handle_ping()

    def handle_pong(self, event) -> None:
        if not self._over_rate():
            super().handle_pong(event)

    def data_received(self, data: bytes) -> None:
        self.last_received_at = self.loop.time()
        super().data_received(data)

    def send_receive_event_to_app(self) -> None:
        if self.curr_msg_data_type == "text" and not self.close_sent:
            data = b"".join(self.frames)
            try:
                data.decode()
            except UnicodeDecodeError as e:
                self.frames = []
                client = f"{self.client[0]}:{self.client[1]}" if self.client else "?"
                self.logger.warning("%s - WebSocket text frame is not valid UTF-8 (%d bytes, "
                                    "at byte %d): closing 1007", client, len(data), e.start)
                self.conn.send_close(1007)
                self.handle_parser_exception()
                return
        super().send_receive_event_to_app()

    def keepalive_timeout(self) -> None:
        alive = self.read_paused or self.last_received_at > self.ping_sent_at
        if not alive:
            self.pong_timer = None
            self.pending_ping_payload = None
            if self.close_sent or self.transport.is_closing():
                return
            type(self).closed += 1
            self.conn.fail(KEEPALIVE_CLOSE_CODE, KEEPALIVE_CLOSE_REASON)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
            self.transport.close()
            return
        type(self).spared += 1
        self.pong_timer = None
        self.pending_ping_payload = None  # a pong to the old ping is now ignored
        if not (self.close_sent or self.transport.is_closing()):
            self.schedule_ping()
