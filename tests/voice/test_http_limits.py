"""Issue 39, item 8: slow clients are reaped. The real app under uvicorn with `diffvoice serve`'s
own settings (voice.http_limits.uvicorn_options), over raw loopback sockets: a connection that
sends nothing, half a request line, half its headers, half a WebSocket upgrade, or half a second
request on a kept-alive connection is closed within a bounded time (before the fix all of them
stayed open for ever); whole requests and WebSocket calls are unaffected. Both of uvicorn's HTTP
protocols (httptools when installed, h11) are covered."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import websockets
from voice_fixtures import UvicornThread, scaled

from diffvoice.voice.http_limits import uvicorn_options
from diffvoice.voice.transport import protocol

HEADER_TIMEOUT_S = 1.0
REQUEST = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
HALVES = {
    "nothing": b"",
    "half_request_line": b"GET /heal",
    "half_headers": b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: a",
    "half_ws_upgrade": b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                       b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n",
    "kept_alive_then_half": REQUEST + b"GET /healthz HTTP/1.1\r\nHo",
}


@pytest.fixture(scope="module", params=["auto", "h11"])
def server(request, voice_state):
    from diffvoice.voice.server import create_app

    config = voice_state.config.replace(header_timeout_s=HEADER_TIMEOUT_S,
                                        keep_alive_timeout_s=30.0)
    state = dataclasses.replace(voice_state, config=config, active_sessions=set(),
                                client_slots=None, session_tokens=None)
    http = None if request.param == "auto" else request.param
    with UvicornThread(create_app(state), **uvicorn_options(config, http=http)) as live:
        yield live


async def _closed_after(port: int, data: bytes) -> float | None:
    """Send `data`, read until the server closes: seconds it took, None if still open."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    t0 = loop.time()
    writer.write(data)
    try:
        async with asyncio.timeout(scaled(8)):
            while await reader.read(65536):
                pass  # a whole request's answer; the connection stays open after it
        return loop.time() - t0
    except TimeoutError:
        return None
    except ConnectionResetError:
        return loop.time() - t0
    finally:
        writer.close()


@pytest.mark.parametrize("name", list(HALVES))
async def test_unfinished_request_heads_are_closed(server, name):
    took = await _closed_after(server.port, HALVES[name])
    assert took is not None, f"{name}: still open after {scaled(8)} s"
    assert took < HEADER_TIMEOUT_S + scaled(3)


async def test_whole_requests_and_calls_are_unaffected(server):
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    for _ in range(2):  # keep-alive: two requests on one connection, a pause between
        writer.write(REQUEST)
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), scaled(10))
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await reader.readexactly(length)
        await asyncio.sleep(HEADER_TIMEOUT_S * 1.5)
    writer.close()
    async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        await ws.send(protocol.SessionStart(config={}).encode())
        started = protocol.decode_server(await asyncio.wait_for(ws.recv(), scaled(30)))
        assert isinstance(started, protocol.SessionStarted)
        await asyncio.sleep(HEADER_TIMEOUT_S * 1.5)  # the head timer is gone after the upgrade
        await ws.send(protocol.Ping().encode())
        async with asyncio.timeout(scaled(10)):
            while True:
                message = await ws.recv()
                if isinstance(message, str) and isinstance(protocol.decode_server(message),
                                                           protocol.Pong):
                    break


def test_options_follow_the_config(voice_state):
    config = voice_state.config.replace(max_sessions=10, connection_headroom=5,
                                        keep_alive_timeout_s=3.0, ws_ping_interval_s=0)
    options = uvicorn_options(config)
    assert options["limit_concurrency"] == 15 and options["timeout_keep_alive"] == 3.0
    assert options["ws_ping_interval"] is None and options["http"].header_timeout_s == 10.0


@pytest.fixture(scope="module")
def tight_server(voice_state):
    """limit_concurrency (max_sessions + connection_headroom) just above one IP's pending-head
    cap, below the half heads the test sends."""
    from diffvoice.voice.http_limits import MAX_PENDING_HEADS_PER_IP
    from diffvoice.voice.server import create_app

    limit = MAX_PENDING_HEADS_PER_IP + 4
    config = voice_state.config.replace(
        header_timeout_s=HEADER_TIMEOUT_S, keep_alive_timeout_s=30.0, max_sessions=2,
        connection_headroom=limit - 2)
    state = dataclasses.replace(voice_state, config=config, active_sessions=set(),
                                client_slots=None, session_tokens=None)
    with UvicornThread(create_app(state), **uvicorn_options(config)) as live:
        yield live


async def test_one_ip_cannot_fill_the_concurrency_limit_with_half_heads(tight_server):
    """More than MAX_PENDING_HEADS_PER_IP half-sent heads from one IP: the extra ones are closed
    at once, so the connection limit (uvicorn's limit_concurrency, which counts them) is never
    reached and another client's request is answered 200, not 503 (found by the reliability
    harness: 150 half heads against a limit of 136 made every /v1 request 503)."""
    from diffvoice.voice.http_limits import MAX_PENDING_HEADS_PER_IP

    n = MAX_PENDING_HEADS_PER_IP + 8
    held = []
    loop = asyncio.get_running_loop()
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", tight_server.port,
                                                       local_addr=("127.0.0.2", 0))
        writer.write(HALVES["half_headers"])
        held.append((reader, writer))

    async def closed(reader) -> bool:  # closed by the server well before the head timeout
        try:
            async with asyncio.timeout(HEADER_TIMEOUT_S / 4):
                return await reader.read(1) == b""
        except ConnectionResetError:  # closed with our half head unread: a reset
            return True
        except TimeoutError:
            return False

    t0 = loop.time()
    closed_at_once = sum(await asyncio.gather(*(closed(r) for r, _ in held)))
    assert loop.time() - t0 < HEADER_TIMEOUT_S / 2  # (else the head timeout closed them)
    assert closed_at_once == n - MAX_PENDING_HEADS_PER_IP
    reader, writer = await asyncio.open_connection("127.0.0.1", tight_server.port)
    writer.write(REQUEST)
    head = await asyncio.wait_for(reader.readline(), scaled(5))
    assert head.startswith(b"HTTP/1.1 200"), head
    writer.close()
    for _, w in held:
        w.close()
