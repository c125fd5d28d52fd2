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
Pass the class as `uvicorn.run(..., ws=KeepaliveWebSocketProtocol)`; `ws_ping_interval=None`
turns keepalive pings off, `ws_ping_timeout=None` sends pings but never times out. The idle
timeout (`idle_timeout_s`, no caller audio) stays the documented reaper of quiet calls.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

KEEPALIVE_CLOSE_CODE = 1008
KEEPALIVE_CLOSE_REASON = "keepalive_timeout"


class KeepaliveWebSocketProtocol(WebSocketsSansIOProtocol):
    spared = 0  # late pongs forgiven because the peer was sending (process-wide counters)
    closed = 0  # connections closed keepalive_timeout

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.last_received_at = 0.0  # loop time of the last bytes from the peer

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
