"""Admission: beyond capacity and beyond the per-IP cap every refusal is clear and nothing is
half-served; idle and silent sockets are reaped on time.

Contract: `await run(ctx, scale)`:
1. fills the server to `max_sessions`: /ws calls up to the browsers' share (each from its own
   loopback IP) and Twilio calls up to the phone lines (`max_phone_calls`), all kept alive with
   silence at real time (idleness is counted in seconds of audio), then checks that one more
   /ws call gets `overloaded` (1013) with no session.started and no audio, the Twilio webhook
   answers busy TwiML (<Say> + <Hangup/>), and a Twilio stream with a valid token is closed
   1013;
2. from one IP opens `per_ip` calls, then one more: `too_many_sessions` (1013);
3. sends 100 concurrent /v1 requests (beyond the engine's max_running + max_queued): each is a
   complete 200 (finish_reason, every token) or a 429 / 503 with Retry-After and an OpenAI
   error body;
4. idle: 3 calls that send session.start and then nothing are closed `idle_timeout` within
   [idle_timeout_s, idle_timeout_s + 2 s] of session.started; 2 sockets that send nothing are
   closed `handshake_timeout` within [handshake_timeout_s, + 2 s] of connecting.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.reliability import attack_phone
from diffvoice.latency_bench.reliability.common import (
    Ctx,
    check,
    health,
    leak_checks,
    next_ip,
    settled,
)
from diffvoice.latency_bench.twilio_client import twilio_signature
from diffvoice.voice.telephony import signature
from diffvoice.voice.transport import protocol


async def _open(ctx: Ctx, ip: str) -> tuple[Any, Any]:
    ws = await connect(ctx.ws, ping_interval=None, open_timeout=30, local_addr=(ip, 0))
    try:  # a refused socket may be closed before this is sent; its error event is still read
        await ws.send(protocol.SessionStart(config={}).encode())
    except ConnectionClosed:
        pass
    try:
        first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 60))
    except ConnectionClosed:
        first = None
    return ws, first


async def _refused(ctx: Ctx, ip: str) -> dict[str, Any]:
    ws, first = await _open(ctx, ip)
    audio = 0
    events = [first]
    try:
        async with asyncio.timeout(10):
            async for message in ws:
                if isinstance(message, bytes):
                    audio += 1
                else:
                    events.append(protocol.decode_server(message))
    except (ConnectionClosed, TimeoutError):
        pass
    return {"error": first.code if isinstance(first, protocol.Error) else None,
            "close": ws.close_code, "started": any(isinstance(e, protocol.SessionStarted)
                                                    for e in events), "audio_frames": audio}


HALF_SECOND = bytes(16000)  # 0.5 s of 16 kHz PCM silence


async def _keepalive(sockets: list, stop: asyncio.Event) -> None:
    """Silence at real time on every held call (idleness is counted in seconds of audio)."""
    while not stop.is_set():
        for ws in sockets:
            try:
                await ws.send(HALF_SECOND)
            except ConnectionClosed:
                pass
        try:
            await asyncio.wait_for(stop.wait(), 0.5)
        except TimeoutError:
            pass


def _webhook_busy(ctx: Ctx) -> bool:
    form = {"CallSid": "CA" + "b" * 32, "AccountSid": "AC" + "0" * 32, "From": "+1555",
            "To": "+1556", "CallStatus": "ringing"}
    request = urllib.request.Request(ctx.webhook, data=urllib.parse.urlencode(form).encode(),
                                     method="POST", headers={
                                         "Content-Type": "application/x-www-form-urlencoded",
                                         "X-Twilio-Signature": twilio_signature(
                                             ctx.twilio_token, ctx.webhook, form)})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read().decode()
    return "<Hangup" in body and "<Stream" not in body


async def _twilio_stream_refused(ctx: Ctx) -> Any:
    sid = "CA" + "c" * 32
    start = {"event": "start", "streamSid": "MZ" + "c" * 32, "start": {
        "streamSid": "MZ" + "c" * 32, "callSid": sid, "accountSid": "AC" + "0" * 32,
        "customParameters": {"token": signature.stream_token(ctx.twilio_token, sid)},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}
    async with connect(ctx.stream, ping_interval=None) as ws:
        await ws.send(json.dumps(start))
        try:
            await asyncio.wait_for(ws.recv(), 20)
        except (ConnectionClosed, TimeoutError):
            pass
        return ws.close_code


def _chat(ctx: Ctx, model: str) -> dict[str, Any]:
    body = json.dumps({"model": model, "max_tokens": 16, "ignore_eos": True,
                       "messages": [{"role": "user", "content": "What are your hours?"}]})
    request = urllib.request.Request(ctx.http + "/v1/chat/completions", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=300) as response:
            data = json.loads(response.read())
            choice = data["choices"][0]
            whole = (choice["finish_reason"] == "length"
                     and data["usage"]["completion_tokens"] == 16)
            return {"status": response.status, "whole": whole}
    except urllib.error.HTTPError as e:
        data = json.loads(e.read() or b"{}")
        return {"status": e.code, "whole": "error" in data and bool(e.headers.get("Retry-After"))}


async def _timed_close(ctx: Ctx, send_start: bool) -> dict[str, Any]:
    t0 = time.monotonic()
    ws = await connect(ctx.ws, ping_interval=None, local_addr=(next_ip(), 0))
    started_t, code = None, None
    if send_start:
        await ws.send(protocol.SessionStart(config={}).encode())
    try:
        async with asyncio.timeout(120):
            async for message in ws:
                event = protocol.decode_server(message) if isinstance(message, str) else None
                if isinstance(event, protocol.SessionStarted):
                    started_t = time.monotonic()
                elif isinstance(event, protocol.Error):
                    code = event.code
    except (ConnectionClosed, TimeoutError):
        pass
    end = time.monotonic()
    return {"error": code, "close": ws.close_code,
            "after_s": round(end - (started_t if send_start and started_t else t0), 2)}


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await settled(ctx)
    capacity = scale["max_sessions"]
    model = ctx.settings["model_name"]
    held, stop = [], asyncio.Event()
    keeper = asyncio.create_task(_keepalive(held, stop))
    phones_cap = scale.get("max_phone_calls") or max(1, capacity // 2)
    phones: list = []
    keepers: list = []
    browsers = 0
    try:
        # browsers up to their share (max_sessions less the phone lines), phones up to theirs
        for _ in range(capacity - phones_cap - (await health(ctx))["active_sessions"]):
            ws, first = await _open(ctx, next_ip())
            held.append(ws)
            browsers += isinstance(first, protocol.SessionStarted)
        for k in range(phones_cap):
            stream = attack_phone.Stream(ctx)
            sid = attack_phone.new_sid()
            params = await attack_phone.webhook(ctx, sid, f"+1555010{k:04d}")
            if params is not None:
                await stream.open(sid, params)
                phones.append(stream)
        keepers = [asyncio.create_task(s.keep_alive(stop)) for s in phones if s.closed is None]
        full = await _refused(ctx, next_ip())
        busy = await asyncio.to_thread(_webhook_busy, ctx)
        stream_close = await _twilio_stream_refused(ctx)
    finally:
        stop.set()
        await keeper
        for ws in held:
            await ws.close()
        for stream in phones:
            await stream.hang_up()
    await asyncio.gather(*keepers)
    held_phones = sum(s.closed is None for s in phones)
    await settled(ctx)
    ip, mine = next_ip(), []
    for _ in range(scale["per_ip"]):
        mine.append((await _open(ctx, ip))[0])
    over_ip = await _refused(ctx, ip)
    for ws in mine:
        await ws.close()
    await settled(ctx)
    answers = await asyncio.gather(*(asyncio.to_thread(_chat, ctx, model) for _ in range(100)))
    statuses = [a["status"] for a in answers]
    idle = await asyncio.gather(*(_timed_close(ctx, True) for _ in range(3)),
                                *(_timed_close(ctx, False) for _ in range(2)))
    after = await settled(ctx, baseline=baseline)
    idle_s, hs_s = scale["idle_timeout_s"], scale["handshake_timeout_s"]
    checks = [
        check(f"{capacity} calls held (browsers and phones each to their share), one more "
              "refused overloaded / 1013, nothing served",
              browsers + held_phones == capacity and full["error"] == "overloaded"
              and full["close"] == 1013 and not full["started"] and full["audio_frames"] == 0,
              f"{browsers} browsers + {held_phones} phones; {json.dumps(full)}"),
        check("Twilio webhook at capacity answers busy TwiML", busy, f"{busy}"),
        check("Twilio stream at capacity closed 1013", stream_close == 1013, f"{stream_close}"),
        check(f"one IP: {scale['per_ip']} calls, the next too_many_sessions / 1013",
              over_ip["error"] == "too_many_sessions" and over_ip["close"] == 1013
              and not over_ip["started"], json.dumps(over_ip)),
        check("100 concurrent /v1 requests: whole 200s or clean 429s / 503s, never "
              "half-served", all(a["whole"] and a["status"] in (200, 429, 503) for a in answers),
              f"200: {statuses.count(200)}, 429: {statuses.count(429)}, 503: "
              f"{statuses.count(503)}, other: "
              f"{len(statuses) - sum(statuses.count(s) for s in (200, 429, 503))}"),
        check(f"idle calls reaped idle_timeout within [{idle_s}, {idle_s + 2}] s",
              all(r["error"] == "idle_timeout" and r["close"] == 1008
                  and idle_s <= r["after_s"] <= idle_s + 2 for r in idle[:3]),
              json.dumps(idle[:3])),
        check(f"silent sockets closed handshake_timeout within [{hs_s}, {hs_s + 2}] s",
              all(r["error"] == "handshake_timeout" and r["close"] == 1008
                  and hs_s <= r["after_s"] <= hs_s + 2 for r in idle[3:]),
              json.dumps(idle[3:])),
        *leak_checks(after, baseline, "after admission"),
    ]
    return {"capacity": capacity, "held": len(held), "refused": full, "over_ip": over_ip,
            "v1_statuses": {"200": statuses.count(200), "429": statuses.count(429),
                            "503": statuses.count(503)},
            "idle": idle, "checks": checks}
