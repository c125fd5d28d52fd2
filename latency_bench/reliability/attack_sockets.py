"""Issue 39's attacks on /ws and on the HTTP server itself (findings 4, 7's /ws half, 8 and 9).

Contract:
- `await ws_audio_flood(ctx, ip, max_frames, within_s)`: one /ws call from `ip` that sends
  64 KiB PCM frames (2.048 s of audio each) as fast as the socket takes them; -> the error
  event and close the server ended it with (docs/protocol.md: `audio_too_fast`, 1008), the audio
  sent and how long it was taken.
- `await ws_rebinding(ctx, ip)`: a /ws upgrade whose Host header *and* Origin name
  evil.example:PORT (DNS rebinding) -> how it was refused (`origin_not_allowed`, 1008).
- `await slow_clients(ctx, ip, heads, upgrades, within_s, during)`: `heads` connections that
  send half a request head and `upgrades` that send half a /ws upgrade, all held open from `ip`;
  -> for each, seconds until the server closed it (None: still open after `within_s`), while
  the coroutine `during()` (innocent traffic) runs once they are all open.
- `await bad_utf8(ctx, n)`: n /ws connections whose first message is a text frame that is not
  UTF-8; -> their close codes.
Every socket is to 127.0.0.1 from a loopback source address; every loop is bounded in count
and time. Knows nothing about the harness's checks.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from diffvoice.latency_bench.reliability.common import next_ip
from diffvoice.voice.transport import protocol

FRAME = bytes(protocol.MAX_AUDIO_FRAME_BYTES)  # the largest frame allowed: 2.048 s of silence
FRAME_S = len(FRAME) / (2 * protocol.INPUT_SAMPLE_RATE)


def _port(ctx) -> int:
    return int(ctx.http.rsplit(":", 1)[1])


async def _read_errors(ws, errors: list[str]) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for message in ws:
            if isinstance(message, str):
                event = protocol.decode_server(message)
                if isinstance(event, protocol.Error):
                    errors.append(event.code)


async def ws_audio_flood(ctx, ip: str, max_frames: int, within_s: float) -> dict[str, Any]:
    """4 (/ws): 64 KiB audio frames as fast as possible on one call."""
    errors: list[str] = []
    sent, t0 = 0, time.monotonic()
    try:
        ws = await connect(ctx.ws, ping_interval=None, open_timeout=30, max_size=None,
                           local_addr=(ip, 0))
    except (OSError, InvalidStatus, TimeoutError) as e:
        return {"error": None, "close": f"connect failed: {e!r}"[:80], "audio_s_sent": 0}
    try:
        await ws.send(protocol.SessionStart(config={}).encode())
        first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 30))
        if not isinstance(first, protocol.SessionStarted):
            return {"error": getattr(first, "code", None), "close": ws.close_code,
                    "audio_s_sent": 0, "refused_at_start": True}
        reader = asyncio.create_task(_read_errors(ws, errors))
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(within_s):
                for _ in range(max_frames):
                    await ws.send(FRAME)
                    sent += 1
        except (ConnectionClosed, TimeoutError):
            pass
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(reader, 10)
    except (ConnectionClosed, TimeoutError):
        pass
    finally:
        await ws.close()
    return {"error": errors[0] if errors else None, "close": ws.close_code,
            "frames_sent": sent, "audio_s_sent": round(sent * FRAME_S, 1),
            "closed_after_s": round(time.monotonic() - t0, 2)}


async def ws_rebinding(ctx, ip: str) -> dict[str, Any]:
    """7 (/ws): Host and Origin both evil.example:PORT, as DNS rebinding makes them."""
    port = _port(ctx)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.bind((ip, 0))
    errors: list[str] = []
    try:
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(
            sock, ("127.0.0.1", port)), 10)
        # the URI names evil.example (so Host does); the socket goes to this server
        async with connect(f"ws://evil.example:{port}/ws", sock=sock, ping_interval=None,
                           origin=f"http://evil.example:{port}", open_timeout=30) as ws:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(protocol.SessionStart(config={}).encode())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(_read_errors(ws, errors), 10)
            return {"error": errors[0] if errors else None, "close": ws.close_code}
    except InvalidStatus as e:
        return {"error": None, "close": f"HTTP {e.response.status_code}"}
    except (OSError, TimeoutError) as e:
        return {"error": None, "close": f"connect failed: {e!r}"[:80]}
    finally:
        sock.close()


_HALF_HEAD = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
_HALF_UPGRADE = (b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                 b"Connection: Upgrade\r\nSec-WebSocket-Version: 13\r\n")


async def _half_open(ctx, ip: str, head: bytes) -> tuple[Any, Any, float] | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(
            "127.0.0.1", _port(ctx), local_addr=(ip, 0)), 10)
    except (OSError, TimeoutError):
        return None
    writer.write(head)
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    return reader, writer, time.monotonic()


async def _closed_after(conn, within_s: float) -> float | None:
    reader, writer, t0 = conn
    try:
        await asyncio.wait_for(reader.read(), within_s)  # EOF (or a reset): the server closed it
        return round(time.monotonic() - t0, 2)
    except ConnectionError:
        return round(time.monotonic() - t0, 2)
    except TimeoutError:
        return None
    finally:
        writer.close()


async def slow_clients(ctx, ip: str, heads: int, upgrades: int, within_s: float,
                       during) -> dict[str, Any]:
    """8: half-sent request heads and /ws upgrades, held until the server closes them."""
    conns = await asyncio.gather(*(_half_open(ctx, ip, _HALF_HEAD) for _ in range(heads)),
                                 *(_half_open(ctx, ip, _HALF_UPGRADE) for _ in range(upgrades)))
    opened = [c for c in conns if c is not None]
    waits = asyncio.gather(*(_closed_after(c, within_s) for c in opened))
    innocent = await during()  # while every slow connection is held
    closed = await waits
    done = [s for s in closed if s is not None]
    return {"opened": len(opened), "connect_failed": len(conns) - len(opened),
            "closed": len(done), "still_open": len(closed) - len(done),
            "closed_after_s_max": max(done, default=None),
            "closed_after_s_min": min(done, default=None), "during": innocent}


async def bad_utf8(ctx, n: int) -> list[Any]:
    """9: a text frame that is not UTF-8, first thing on each of n /ws connections."""
    async def one(i: int) -> Any:
        try:
            async with connect(ctx.ws, ping_interval=None, open_timeout=30,
                               local_addr=(next_ip(), 0)) as ws:
                await ws.send(b"\xff\xfe{\"type\":\"ping\"}" + bytes([0xC0 + i % 32]), text=True)
                with contextlib.suppress(ConnectionClosed, TimeoutError):
                    async with asyncio.timeout(10):
                        async for _ in ws:
                            pass
                return ws.close_code
        except (OSError, InvalidStatus, TimeoutError) as e:
            return f"connect failed: {e!r}"[:80]
        except ConnectionClosed as e:
            return e.rcvd.code if e.rcvd else None

    return list(await asyncio.gather(*(one(i) for i in range(n))))
