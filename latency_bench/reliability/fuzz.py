"""Fuzz: malformed inputs on /ws, the Twilio webhook and stream, and /v1, while legitimate calls
stream real speech.

Contract: `await run(ctx, scale)` sends `scale["fuzz_inputs"]` malformed inputs (fuzz_cases,
seeded; `scale["fuzz_schemas"]` of them /v1 requests with generated hostile schemas, counted
apart as `generated_schemas`) with `scale["fuzz_concurrency"]` in flight, plus
`scale["fuzz_mid_calls"]` /ws calls that send one bad message after session.start and
`scale["fuzz_media_calls"]` Twilio calls that slip `MALFORMED_PER_CALL` malformed messages
between valid media and then hang up; meanwhile
`scale["fuzz_legit_calls"]` calls (browser and Twilio, alternating) speak
`scale["fuzz_legit_turns"]` turns each. Every input's outcome is compared with the documented
one; the result counts inputs per surface/family, mismatches (with examples), 1011/5xx answers,
legitimate turns answered, the server's /metrics leak gauges afterwards, and the engine's
diffvoice_engine_worker_prepare_max_ms (checked <= 100 ms).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
import urllib.parse
from collections import Counter
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from diffvoice.latency_bench.reliability import fuzz_cases
from diffvoice.latency_bench.reliability.common import (
    Ctx,
    answered,
    check,
    leak_checks,
    legit_calls,
    metrics,
    next_ip,
    settled,
    turn_summary,
)
from diffvoice.latency_bench.twilio_client import twilio_signature
from diffvoice.voice.telephony import signature
from diffvoice.voice.transport import protocol

MALFORMED_PER_CALL = 40  # < the server's MAX_MALFORMED (50): the call must survive them
PREPARE_GOAL_MS = 100.0  # the longest one request's preparation may hold the engine's worker
PREPARE = "diffvoice_engine_worker_prepare_max_ms"


async def _ws_outcome(url: str, payload, first=None, within_s: float = 20.0) -> tuple:
    errors: list[str] = []
    try:
        async with connect(url, max_size=None, ping_interval=None, open_timeout=within_s,
                           local_addr=(next_ip(), 0)) as ws:
            if first is not None:
                await ws.send(first)
                await asyncio.wait_for(ws.recv(), within_s)  # session.started
            try:
                # (a frame over the WebSocket limit can be refused, 1009, while it is sent)
                await ws.send(payload)
                async with asyncio.timeout(within_s):
                    async for message in ws:
                        if isinstance(message, str):
                            event = protocol.decode_server(message)
                            if isinstance(event, protocol.Error):
                                errors.append(event.code)
            except ConnectionClosed:
                pass
            return tuple(errors), ws.close_code
    except TimeoutError:
        return tuple(errors), "timeout"
    except (OSError, InvalidStatus) as e:
        return tuple(errors), f"connect failed: {e!r}"[:80]


async def _post(ctx: Ctx, path: str, body: bytes, headers: dict) -> int:
    """POST over a raw loopback socket: headers first, then (unless the server already answered,
    as it must for a body over the limit) the body; -> the response status (-1: none)."""
    port = int(ctx.http.rsplit(":", 1)[1])
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}",
            "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    try:  # each input from an address of its own: one fuzzing client per request, so the
        # per-client API limits (8 in flight) do not answer the fuzz's concurrency instead
        reader, writer = await asyncio.open_connection("127.0.0.1", port,
                                                       local_addr=(next_ip(), 0))
    except OSError:
        return -1
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode())
        await writer.drain()
        first = asyncio.ensure_future(reader.readline())
        done, _ = await asyncio.wait({first}, timeout=0.05 if len(body) < (64 << 10) else 2.0)
        if not done:
            writer.write(body)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        line = await asyncio.wait_for(first, 30)
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1
    except (TimeoutError, ConnectionError):
        return -1
    finally:
        writer.close()


async def _webhook(ctx: Ctx, case) -> int:
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    form = case.payload
    body = form if isinstance(form, bytes) else (
        form.encode() if isinstance(form, str) else urllib.parse.urlencode(form).encode())
    sign = case.extra["sign"]
    if sign is True and isinstance(form, dict):
        headers["X-Twilio-Signature"] = twilio_signature(ctx.twilio_token, ctx.webhook, form)
    elif isinstance(sign, str):
        headers["X-Twilio-Signature"] = sign
    return await _post(ctx, "/telephony/twilio/voice", body, headers)


async def _stream(ctx: Ctx, case) -> Any:
    try:
        async with connect(ctx.stream, max_size=None, ping_interval=None, open_timeout=20) as ws:
            for message in case.payload:
                await ws.send(message)
            try:
                await asyncio.wait_for(ws.recv(), 20)
            except ConnectionClosed:
                pass
            except TimeoutError:
                return "timeout"
            return ws.close_code
    except (OSError, InvalidStatus) as e:
        return f"connect failed: {e!r}"[:80]


async def _v1(ctx: Ctx, case) -> int:
    return await _post(ctx, "/v1/chat/completions", case.payload,
                       {"Content-Type": "application/json"})


async def _media_call(ctx: Ctx, rng: random.Random, index: int) -> dict[str, Any]:
    """A call with a valid token that slips malformed messages between valid silence media."""
    sid = f"CA{index:032d}"
    token = signature.stream_token(ctx.twilio_token, sid)
    start = fuzz_cases._start(sid, customParameters={"token": token})
    silence = base64.b64encode(b"\xff" * 160).decode()
    sent = 0
    closed_early = None
    try:
        # from an address of its own, as Twilio's media streams come from a pool of them (one
        # address may hold only --max-pending-streams-per-ip sockets before their 'start')
        async with connect(ctx.stream, ping_interval=None, open_timeout=30,
                           local_addr=(next_ip(), 0)) as ws:
            await ws.send(json.dumps({"event": "connected", "protocol": "Call",
                                      "version": "1.0.0"}))
            await ws.send(json.dumps(start))
            for k in range(MALFORMED_PER_CALL * 3):
                if k % 3 == 1:
                    await ws.send(fuzz_cases.media_garbage(rng))
                    sent += 1
                else:
                    await ws.send(json.dumps({"event": "media", "streamSid": start["streamSid"],
                                              "media": {"payload": silence}}))
                await asyncio.sleep(0.02)
            await ws.send(json.dumps({"event": "stop", "streamSid": start["streamSid"]}))
            try:
                async with asyncio.timeout(20):
                    async for _ in ws:
                        pass
            except (ConnectionClosed, TimeoutError):
                pass
    except ConnectionClosed as e:
        closed_early = e.rcvd.code if e.rcvd else -1
    except OSError as e:
        closed_early = repr(e)
    return {"malformed_sent": sent, "closed_before_stop": closed_early}


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    rng = random.Random(12)
    schemas = scale.get("fuzz_schemas", 0)
    n = scale["fuzz_inputs"] - schemas  # the hand-written families share the rest
    model = ctx.settings["model_name"]
    cases = (fuzz_cases.ws_cases(rng, int(n * 0.35)) + fuzz_cases.webhook_cases(rng, int(n * 0.2))
             + fuzz_cases.stream_cases(rng, int(n * 0.2)) + fuzz_cases.v1_cases(rng, n - int(
                 n * 0.35) - 2 * int(n * 0.2), model)
             + fuzz_cases.schema_cases(rng, schemas, model))
    rng.shuffle(cases)
    baseline = await metrics(ctx)
    counts: Counter = Counter()
    schema_statuses: Counter = Counter()
    bad: list[str] = []
    five_hundreds = 0
    sem = asyncio.Semaphore(scale["fuzz_concurrency"])

    async def one(case) -> None:
        nonlocal five_hundreds
        async with sem:
            if case.surface == "ws":
                got = await _ws_outcome(ctx.ws, case.payload)
                want = ((case.expect_code,) if case.expect_code else (), case.expect_close)
            elif case.surface == "stream":
                got, want = await _stream(ctx, case), case.expect_close
            else:
                got = await (_webhook(ctx, case) if case.surface == "webhook" else _v1(ctx, case))
                want = case.expect_status
            ok = got in want if case.surface in ("webhook", "v1") else got == want
        counts[(case.surface, case.family, ok)] += 1
        if case.family == "generated_schema":
            schema_statuses[str(got)] += 1
        if case.surface in ("webhook", "v1"):
            server_fault = isinstance(got, int) and got >= 500
        elif case.surface == "ws":
            server_fault = isinstance(got, tuple) and ("internal" in got[0] or got[1] == 1011)
        else:
            server_fault = got == 1011
        five_hundreds += server_fault
        if not ok and len(bad) < 20:
            bad.append(f"{case.surface}/{case.family}: want {want}, got {got}")

    async def mid_calls() -> list:
        late = [protocol.SessionStart(config={}).encode(), '{"type":"dance"}', b"\x01",
                "[" * 3000 + "]" * 3000, '{"type":"\\ud800"}']
        codes = {0: ("late_session_start", 1008), 1: ("unknown_type", 1003),
                 2: ("odd_pcm", 1007), 3: ("bad_json", 1007), 4: ("bad_json", 1007)}
        out = []
        for i in range(scale["fuzz_mid_calls"]):
            got = await _ws_outcome(ctx.ws, late[i % 5],
                                    first=protocol.SessionStart(config={}).encode())
            code, close = codes[i % 5]
            out.append(got == ((code,), close))
        return out

    t0 = time.monotonic()
    fuzzing = asyncio.gather(*(one(c) for c in cases))
    media = asyncio.gather(*(_media_call(ctx, rng, i) for i in range(scale["fuzz_media_calls"])))
    legit = legit_calls(ctx, scale["fuzz_legit_calls"], scale["fuzz_legit_turns"])
    _, mids, media_calls, turns = await asyncio.gather(fuzzing, mid_calls(), media, legit)
    elapsed = time.monotonic() - t0
    after = await settled(ctx, baseline=baseline)

    total = sum(counts.values()) + len(mids) + sum(m["malformed_sent"] for m in media_calls)
    mismatched = sum(v for (_, _, ok), v in counts.items() if not ok)
    families: dict[str, dict[str, int]] = {}
    for (surface, family, ok), v in counts.items():
        entry = families.setdefault(f"{surface}/{family}", {"ok": 0, "bad": 0})
        entry["ok" if ok else "bad"] += v
    survived = sum(m["closed_before_stop"] is None for m in media_calls)
    good_turns = sum(answered(t) for t in turns)
    generated = sum(schema_statuses.values())
    prepare_ms = after.get(PREPARE)
    checks = [
        check(f"at least {scale['fuzz_min_total']} malformed inputs", total >=
              scale["fuzz_min_total"], f"{total}"),
        check("every malformed input got its documented outcome", mismatched == 0 and all(mids),
              f"{mismatched} of {sum(counts.values())} single inputs, "
              f"{len(mids) - sum(mids)} of {len(mids)} mid-call"),
        check(f"at least {schemas} of them generated schemas (200 or 4xx, never 5xx)",
              generated >= schemas, f"{generated}: {json.dumps(dict(schema_statuses))}"),
        check("0 answers of 1011 / 5xx to client mistakes", five_hundreds == 0,
              f"{five_hundreds}"),
        check(f"no request held the engine worker > {PREPARE_GOAL_MS:.0f} ms of preparation",
              prepare_ms is not None and prepare_ms <= PREPARE_GOAL_MS, f"{prepare_ms} ms"),
        check("calls with malformed media messages were not ended by them",
              survived == len(media_calls), f"{survived} of {len(media_calls)}"),
        check("legitimate calls answered every turn", good_turns == len(turns),
              f"{good_turns} of {len(turns)}"),
        *leak_checks(after, baseline, "after fuzz"),
    ]
    return {"inputs": total, "generated_schemas": generated,
            "generated_schema_statuses": dict(schema_statuses),
            "worker_prepare_max_ms": prepare_ms, "elapsed_s": round(elapsed, 1),
            "families": families,
            "mismatch_examples": bad, "mid_call_ok": sum(mids), "mid_calls": len(mids),
            "media_calls": media_calls[:5], "legit": turn_summary(turns), "checks": checks}
