"""Keepalive (voice.transport.keepalive): a client that keeps sending but never answers pings is
not closed (uvicorn's own protocol closes it 1011 "keepalive ping timeout", the soak's failure);
a client that sends nothing at all is closed 1008 `keepalive_timeout`, as docs/protocol.md
says. The client is a raw socket driven by websockets' sans-I/O protocol so that its pongs can
be withheld.

Issue 54 N5: every frame (binary, text, fragments, pings) counts against the message rate
(voice.transport.message_rate); a flood of empty frames or of pings is closed 1008
`message_rate` (before: never closed), and a route's `limit_socket` sets the protocol's rate."""

import asyncio
import time
from types import SimpleNamespace

import pytest
from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect
from voice_fixtures import UvicornThread
from websockets.client import ClientProtocol
from websockets.frames import Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from diffvoice.voice.transport.keepalive import (
    KEEPALIVE_CLOSE_CODE,
    KEEPALIVE_CLOSE_REASON,
    KeepaliveWebSocketProtocol,
)
from diffvoice.voice.transport.message_rate import DEFAULT_BURST, limit_socket

STRICT = SimpleNamespace(ws_message_rate=20.0, ws_message_burst=5)

PING_S, TIMEOUT_S = 0.2, 0.3


@pytest.fixture(scope="module")
def port():
    app = FastAPI()

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        try:
            for _ in range(100_000):
                await websocket.receive_bytes()
        except WebSocketDisconnect:
            pass

    @app.websocket("/strict")
    async def strict(websocket: WebSocket) -> None:
        await websocket.accept()
        assert limit_socket(websocket, STRICT) is None  # the protocol enforces it
        await websocket.send_text("limited")
        try:
            for _ in range(100_000):
                await websocket.receive()
        except (WebSocketDisconnect, RuntimeError):
            pass

    with UvicornThread(app, lifespan="off", ws=KeepaliveWebSocketProtocol,
                       ws_ping_interval=PING_S, ws_ping_timeout=TIMEOUT_S) as server:
        yield server.port


async def _client(port: int, send_every_s: float | None, for_s: float) -> dict:
    """Open /ws and never answer a ping; send a 640-byte binary frame every `send_every_s` (None:
    nothing). Returns the pings seen and the server's close (None: still open after `for_s`)."""
    proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/ws"))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    proto.send_request(proto.connect())
    writer.write(b"".join(proto.data_to_send()))
    pings, close = 0, None
    t0 = time.monotonic()
    next_send = t0
    try:
        while time.monotonic() - t0 < for_s and close is None:
            if (send_every_s is not None and proto.state is State.OPEN
                    and time.monotonic() >= next_send):
                proto.send_binary(bytes(640))
                writer.write(b"".join(proto.data_to_send()))
                next_send += send_every_s
            try:
                data = await asyncio.wait_for(reader.read(65536), 0.02)
            except TimeoutError:
                continue
            if data:
                proto.receive_data(data)
            else:
                proto.receive_eof()
            proto.data_to_send()  # dropped: the automatic pongs (and a close echo) never go out
            for frame in proto.events_received():
                if getattr(frame, "opcode", None) is Opcode.PING:
                    pings += 1
            if proto.close_rcvd is not None:
                close = (proto.close_rcvd.code, proto.close_rcvd.reason)
            elif not data:
                close = ("eof", "")
    finally:
        writer.close()
    return {"pings": pings, "close": close, "after_s": time.monotonic() - t0}


def test_a_client_that_keeps_sending_is_not_closed_for_late_pongs(port):
    spared = KeepaliveWebSocketProtocol.spared
    got = asyncio.run(_client(port, send_every_s=0.02, for_s=3 * (PING_S + TIMEOUT_S)))
    assert got["close"] is None, got  # uvicorn's own protocol: 1011 "keepalive ping timeout"
    assert got["pings"] >= 2, got     # keepalive pings kept coming, none answered
    assert KeepaliveWebSocketProtocol.spared > spared


def test_a_silent_client_is_closed_keepalive_timeout_not_1011(port):
    got = asyncio.run(_client(port, send_every_s=None, for_s=5.0))
    assert got["close"] == (KEEPALIVE_CLOSE_CODE, KEEPALIVE_CLOSE_REASON), got
    assert got["close"][0] != 1011
    assert got["after_s"] < PING_S + TIMEOUT_S + 2.0, got


def test_serve_passes_its_keepalive_settings_to_uvicorn():
    from diffvoice.voice.config import ServeConfig

    assert ServeConfig().ws_ping_interval_s == 20.0 and ServeConfig().ws_ping_timeout_s == 20.0
    with pytest.raises(ValueError, match="ws_ping_timeout_s"):
        ServeConfig(ws_ping_timeout_s=-1)


async def _flood(port: int, path: str, frames: int, kind: str = "binary",
                 wait_first: bool = False) -> tuple | None:
    """Send `frames` empty frames (or pings) in one write; the server's close, or None if the
    socket is still open 0.8 s later."""
    proto = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}{path}"))
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    proto.send_request(proto.connect())
    writer.write(b"".join(proto.data_to_send()))
    try:
        while proto.state is not State.OPEN:
            proto.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        if wait_first:  # the route has applied its limit (it sends one message after)
            while not proto.events_received():
                proto.receive_data(await asyncio.wait_for(reader.read(65536), 5))
        for _ in range(frames):
            proto.send_ping(b"") if kind == "ping" else proto.send_binary(b"")
        writer.write(b"".join(proto.data_to_send()))
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            try:
                data = await asyncio.wait_for(reader.read(65536), 0.1)
            except TimeoutError:
                continue
            if not data:
                break
            proto.receive_data(data)
            writer.write(b"".join(proto.data_to_send()))  # pongs: keepalive must not close it
            if proto.close_rcvd is not None:
                return proto.close_rcvd.code, proto.close_rcvd.reason
        return None if time.monotonic() >= deadline else ("eof", "")
    finally:
        writer.close()


@pytest.mark.parametrize("kind", ["binary", "ping"])
def test_a_flood_of_empty_frames_or_pings_is_closed_message_rate(port, kind):
    flooded = KeepaliveWebSocketProtocol.flooded
    got = asyncio.run(_flood(port, "/ws", 4 * DEFAULT_BURST, kind))
    assert got == (1008, "message_rate")
    assert KeepaliveWebSocketProtocol.flooded == flooded + 1


def test_the_route_sets_the_rate_and_a_burst_within_it_passes(port):
    assert asyncio.run(_flood(port, "/ws", 30)) is None  # the default rate takes 30 at once
    assert asyncio.run(_flood(port, "/strict", 30, wait_first=True)) == (1008, "message_rate")


@pytest.mark.parametrize("kind", ["binary", "ping"])
def test_a_peer_that_keeps_flooding_still_reads_the_close_reason(port, kind):
    """A flooding client does not stop to read: the server's close frame must still reach it
    (closing the socket over the unread flood sent a reset, and the client saw 1006 with no
    reason; seen by the reliability siege)."""
    from websockets.asyncio.client import connect
    from websockets.exceptions import ConnectionClosed

    async def flood() -> tuple:
        async with connect(f"ws://127.0.0.1:{port}/ws", ping_interval=None) as ws:
            try:
                for i in range(50 * DEFAULT_BURST):
                    await (ws.ping() if kind == "ping" else ws.send(b""))
                    if i % 100 == 0:
                        await asyncio.sleep(0)
            except ConnectionClosed as e:
                return (e.rcvd.code, e.rcvd.reason) if e.rcvd else (None, "no close frame")
        return None

    assert asyncio.run(flood()) == (1008, "message_rate")
