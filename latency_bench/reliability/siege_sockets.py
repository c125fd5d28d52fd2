"""The siege's socket-level attacks (issue 54 N3, N5, N6, N10, N11, N12), for
latency_bench.reliability.siege: each `await nX(ctx, scale)` sends its attack from loopback
addresses of its own and returns {"ok": the documented outcome, "detail": str,
"server_faults": 5xx / 1011 answers, ...}. `raw(ctx, ip, head)` is one request over a raw
socket; `count(statuses)` tallies outcomes. Every loop is bounded in count and time. Knows
nothing about the harness's checks or the live callers."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from diffvoice.latency_bench.reliability import attack_phone
from diffvoice.latency_bench.reliability.attack_api import chat_body, innocent_content, post
from diffvoice.latency_bench.reliability.attacks import _log_size, _log_tail
from diffvoice.latency_bench.reliability.common import Ctx, next_ip
from diffvoice.voice.transport import protocol


def port(ctx: Ctx) -> int:
    return int(ctx.http.rsplit(":", 1)[1])

async def raw(ctx: Ctx, ip: str, head: str, body: bytes = b"", read_s: float = 30.0
               ) -> tuple[int, str]:
    """One request over a raw socket from `ip` -> (status or -1, body text)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port(ctx),
                                                       local_addr=(ip, 0))
    except OSError as e:
        return -1, f"connect failed: {e!r}"
    try:
        writer.write(head.encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), read_s)
    except (TimeoutError, ConnectionError) as e:
        return -1, type(e).__name__
    finally:
        writer.close()
    line, _, rest = raw.partition(b"\r\n")
    parts = line.split()
    status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1
    return status, rest.partition(b"\r\n\r\n")[2].decode("utf-8", "replace")

def count(statuses: list) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in statuses:
        out[str(s)] = out.get(str(s), 0) + 1
    return dict(sorted(out.items()))

async def _held(ctx: Ctx, ip: str, head: bytes, within_s: float) -> tuple[str, float | None]:
    """Send `head` (and nothing more) from `ip`; -> (what the server answered or 'closed' /
    'open', seconds until the server closed it)."""
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port(ctx),
                                                       local_addr=(ip, 0))
    except OSError:
        return "refused at connect", 0.0
    try:
        writer.write(head)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), within_s)
    except TimeoutError:
        return "open", None
    except ConnectionError:
        return "closed", time.monotonic() - t0
    finally:
        writer.close()
    line = raw.partition(b"\r\n")[0].split()
    return (line[1].decode() if len(line) >= 2 else "closed"), time.monotonic() - t0


async def n3(ctx: Ctx, scale: dict) -> dict[str, Any]:
    body_limit = float(scale["sg_body_timeout_s"]) + 5.0
    ip = next_ip()
    head = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
            b"application/json\r\nContent-Length: 1000\r\n\r\n{")
    slow = [asyncio.create_task(_held(ctx, ip, head, body_limit + 10))
            for _ in range(scale["sg_slow_bodies"])]
    phone_ip = next_ip()
    silent = [asyncio.create_task(_silent_stream(ctx, phone_ip, body_limit + 10))
              for _ in range(scale["sg_silent_streams"])]
    await asyncio.sleep(1.0)  # all of them open (or refused) before the others ask
    other = next_ip()
    healthz = await raw(ctx, other, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                                     "Connection: close\r\n\r\n")
    innocent = await post(ctx, "/v1/chat/completions", chat_body(ctx.settings["model_name"],
                                                                 innocent_content(0)), ip=other)
    try:
        await attack_phone.webhook(ctx, attack_phone.new_sid(), "+15550107011")
        hook = 200
    except RuntimeError as e:
        hook = str(e)[:80]
    slow_out = await asyncio.gather(*slow)
    silent_out = await asyncio.gather(*silent)
    late = [s for _, s in slow_out + silent_out if s is None or s > body_limit]
    ok = (healthz[0] == 200 and innocent.status == 200 and hook == 200 and not late)
    return {"ok": ok, "server_faults": sum(str(a).startswith("5") for a, _ in slow_out)
            + (innocent.status >= 500) + (healthz[0] >= 500),
            "detail": f"{scale['sg_slow_bodies']} slow bodies from one address: "
                      f"{count([a for a, _ in slow_out])}, slowest close "
                      f"{_max_s(slow_out)} s; {scale['sg_silent_streams']} Twilio sockets "
                      f"without start: {count([a for a, _ in silent_out])}, slowest close "
                      f"{_max_s(silent_out)} s (goal <= {body_limit:.0f}); meanwhile "
                      f"/healthz {healthz[0]}, /v1 {innocent.status}, signed webhook {hook}"}


def _max_s(outcomes) -> float | None:
    times = [s for _, s in outcomes if s is not None]
    return round(max(times), 1) if times else None


async def _silent_stream(ctx: Ctx, ip: str, within_s: float) -> tuple[str, float | None]:
    t0 = time.monotonic()
    try:
        async with connect(ctx.stream, ping_interval=None, open_timeout=30,
                           local_addr=(ip, 0)) as ws:
            with contextlib.suppress(ConnectionClosed):
                await asyncio.wait_for(ws.wait_closed(), within_s)
            if ws.close_code is None:
                return "open", None
            return str(ws.close_code), time.monotonic() - t0
    except InvalidStatus as e:  # refused before the upgrade (e.g. 429: too many heads)
        return f"HTTP {e.response.status_code}", time.monotonic() - t0
    except (OSError, InvalidHandshake, TimeoutError) as e:
        return f"refused: {type(e).__name__}", time.monotonic() - t0


async def _ws_flood(ctx: Ctx, kind: str, within_s: float) -> dict[str, Any]:
    t0, sent = time.monotonic(), 0
    try:
        ws = await connect(ctx.ws, ping_interval=None, open_timeout=30,
                           local_addr=(next_ip(), 0))
    except (OSError, InvalidStatus, TimeoutError) as e:
        return {"close": f"connect failed: {e!r}"[:80], "reason": "", "sent": 0}
    try:
        await ws.send(protocol.SessionStart(config={}).encode())
        while time.monotonic() - t0 < within_s:
            if kind == "pings":
                await ws.ping()
            else:
                await ws.send(b"")
            sent += 1
            if sent % 200 == 0:
                await asyncio.sleep(0)
    except ConnectionClosed:
        pass
    finally:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ws.wait_closed(), 5)
        await ws.close()
    return {"close": ws.close_code, "reason": ws.close_reason or "", "sent": sent,
            "closed_after_s": round(time.monotonic() - t0, 1)}


async def n5(ctx: Ctx, scale: dict) -> dict[str, Any]:
    within = scale["sg_flood_close_s"]
    pings, empty = await asyncio.gather(_ws_flood(ctx, "pings", within),
                                        _ws_flood(ctx, "empty", within))
    ok = all(f["close"] == 1008 and "message_rate" in f["reason"]
             and f["closed_after_s"] <= within for f in (pings, empty))
    return {"ok": ok, "server_faults": sum(f["close"] == 1011 for f in (pings, empty)),
            "detail": f"ping flood: {pings['close']} {pings['reason']!r} after {pings['sent']} "
                      f"pings in {pings.get('closed_after_s')} s; empty frames: "
                      f"{empty['close']} {empty['reason']!r} after {empty['sent']} in "
                      f"{empty.get('closed_after_s')} s (goal: 1008 message_rate within "
                      f"{within} s)"}


async def n6(ctx: Ctx, scale: dict) -> dict[str, Any]:
    ips = [next_ip() for _ in range(scale["sg_n6_ips"])]
    held: list[Any] = []
    refused: dict[str, int] = {}
    for k in range(scale["sg_silent_browsers"]):
        try:
            ws = await connect(ctx.ws, ping_interval=None, open_timeout=30,
                               local_addr=(ips[k % len(ips)], 0))
            await ws.send(protocol.SessionStart(config={}).encode())
            first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 30))
            if isinstance(first, protocol.Error):
                refused[first.code] = refused.get(first.code, 0) + 1
                await ws.close()
            else:
                held.append(ws)
        except (OSError, InvalidStatus, TimeoutError, ConnectionClosed) as e:
            refused[type(e).__name__] = refused.get(type(e).__name__, 0) + 1
    stream = attack_phone.Stream(ctx)
    try:
        sid = attack_phone.new_sid()
        params = await attack_phone.webhook(ctx, sid, "+15550107021")
        if params is None:
            outcome: Any = ("busy TwiML", None)
        else:
            await stream.open(sid, params)
            outcome = await stream.outcome(2.0)
    finally:
        await stream.hang_up()
        for ws in held:
            await ws.close()
    ok = outcome[0] == "open"
    return {"ok": ok, "server_faults": 0,
            "detail": f"{len(held)} silent browser sessions held from {len(ips)} addresses "
                      f"(refused: "
                      f"{refused}); a phone call meanwhile: {outcome[0]} {outcome[1] or ''}"}

async def n10(ctx: Ctx, scale: dict) -> dict[str, Any]:
    offset = _log_size(ctx)
    n = scale["sg_cut_bodies"]

    async def cut() -> None:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port(ctx),
                                                      local_addr=(next_ip(), 0))
        except OSError:
            return
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 5000\r\n\r\n{\"model\": ")
        await writer.drain()
        await asyncio.sleep(0.2)
        writer.transport.abort()  # gone mid-body

    await asyncio.gather(*(cut() for _ in range(n)))
    await asyncio.sleep(1.0)
    tail = _log_tail(ctx, offset)
    lines = len([line for line in tail.splitlines() if line.strip()])
    tracebacks = tail.count("Traceback (most recent call last)")
    ok = lines <= n and tracebacks == 0
    return {"ok": ok, "server_faults": 0, "log_lines": lines, "tracebacks": tracebacks,
            "detail": f"{n} POSTs cut mid-body: {lines} log lines, {tracebacks} tracebacks "
                      f"(goal <= {n} lines, 0 tracebacks)"}


async def n11(ctx: Ctx) -> dict[str, Any]:
    ip = next_ip()
    got = {}
    for path in ("/healthz", "/metrics", "/openapi.json"):
        got[path] = (await raw(ctx, ip, f"GET {path} HTTP/1.1\r\nHost: evil.example:"
                                         f"{port(ctx)}\r\nConnection: close\r\n\r\n"))[0]
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.bind((ip, 0))
    try:  # the URI names evil.example (so Host does, as DNS rebinding makes it); no Origin
        await asyncio.wait_for(asyncio.get_running_loop().sock_connect(
            sock, ("127.0.0.1", port(ctx))), 10)
        async with connect(f"ws://evil.example:{port(ctx)}/ws", sock=sock, ping_interval=None,
                           open_timeout=30) as ws:
            await ws.send(protocol.SessionStart(config={}).encode())
            first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 10))
            got["/ws"] = first.code if isinstance(first, protocol.Error) else "accepted"
    except InvalidStatus as e:
        got["/ws"] = e.response.status_code
    except ConnectionClosed as e:
        got["/ws"] = e.rcvd.code if e.rcvd else "closed"
    finally:
        sock.close()
    ok = all(v != 200 and v != "accepted" and not (isinstance(v, int) and v >= 500)
             for v in got.values())
    return {"ok": ok, "server_faults": sum(isinstance(v, int) and v >= 500 for v in got.values()),
            "detail": f"Host evil.example: {got}"}


async def n12(ctx: Ctx, scale: dict) -> dict[str, Any]:
    ip, held, outcomes = next_ip(), [], []
    for k in range(scale["per_ip"] + 2):
        try:
            ws = await connect(ctx.ws, ping_interval=None, open_timeout=30, local_addr=(ip, 0),
                               additional_headers={"X-Forwarded-For": f"203.0.113.{k + 1}"})
            await ws.send(protocol.SessionStart(config={}).encode())
            first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 30))
            outcomes.append(first.code if isinstance(first, protocol.Error) else "started")
            held.append(ws)
        except InvalidStatus as e:
            outcomes.append(e.response.status_code)
        except ConnectionClosed as e:
            outcomes.append(f"{e.rcvd.code if e.rcvd else 'closed'}")
    for ws in held:
        await ws.close()
    started = outcomes.count("started")
    ok = started <= scale["per_ip"] and len(outcomes) > started
    return {"ok": ok, "server_faults": outcomes.count("1011"),
            "detail": f"{len(outcomes)} /ws sessions from one address with distinct "
                      f"X-Forwarded-For: {started} started (per-IP cap {scale['per_ip']}), "
                      f"others {[o for o in outcomes if o != 'started']}"}
