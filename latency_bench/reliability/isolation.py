"""Isolation: one abusive client (bad seeds, huge prompts, socket and ping floods) while other
callers speak; their answers and the /ws ping round-trip must not notice.

Contract: `await run(ctx, scale)`: one unmeasured one-turn call per protocol warms the server
up; a PingProbe measures the /ws ping round-trip throughout each round. Round 1 (quiet):
`scale["iso_legit_turns"]`-turn browser + Twilio calls alone. Round 2 (abused): the same calls
while one loopback IP sends `iso_bad_requests` /v1 requests with seeds >= 2**63
(400) interleaved with valid sampled requests (200), `iso_huge_prompts` prompts of ~1 MB
(400, refused before templating) and 10 MB bodies (413 from the headers alone), opens
`iso_flood_sockets` /ws sockets (beyond the per-IP cap: 1013 too_many_sessions) and floods one
of them with pings. Checks: every legit turn answered in both rounds, probe p99 < 100 ms during
the abuse, the browser caller's server_ms p99 in the abused round <= 2x the quiet round's, every
abusive request got its documented status, leak gauges back to 0.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.reliability.common import (
    Ctx,
    PingProbe,
    answered,
    check,
    leak_checks,
    legit_calls,
    metrics,
    next_ip,
    settled,
    turn_summary,
)
from diffvoice.latency_bench.reliability.fuzz import _post
from diffvoice.voice.transport import protocol

RTT_GOAL_MS = 100.0
SERVER_MS_RATIO = 2.0  # legit server_ms p99 abused / quiet


async def _abuse(ctx: Ctx, scale: dict, ip: str) -> dict[str, Any]:
    model = ctx.settings["model_name"]
    statuses: Counter = Counter()

    async def chat(body: dict | bytes, expect: int, label: str) -> None:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        got = await _post(ctx, "/v1/chat/completions", raw,
                          {"Content-Type": "application/json"})  # text/plain gets 415 now
        statuses[(label, got == expect)] += 1

    async def seeds() -> None:
        for i in range(scale["iso_bad_requests"]):
            seed, expect = ((2**64 + i, 400) if i % 4 else (2**63 - 1 - i, 200))
            await chat({"model": model, "max_tokens": 4, "temperature": 0.9, "seed": seed,
                        "messages": [{"role": "user", "content": "hello"}]}, expect, "seed")

    async def huge() -> None:
        for _ in range(scale["iso_huge_prompts"]):
            await chat({"model": model, "messages": [{"role": "user",
                                                      "content": "word " * 200_000}]},
                       400, "prompt_1MB")
            await chat(b"x" * (10 << 20), 413, "body_10MB")

    async def flood() -> dict[str, Any]:
        refused, accepted, pings = 0, [], 0
        closes: Counter = Counter()
        for _ in range(scale["iso_flood_sockets"]):
            try:
                ws = await connect(ctx.ws, ping_interval=None, open_timeout=20,
                                   local_addr=(ip, 0))
            except OSError:
                closes["connect_failed"] += 1
                continue
            try:  # a refused socket may be closed before this goes out; its error is still read
                await ws.send(protocol.SessionStart(config={}).encode())
            except ConnectionClosed:
                pass
            try:
                first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 20))
            except (ConnectionClosed, TimeoutError) as e:
                closes[type(e).__name__] += 1
                await ws.close()
                continue
            if isinstance(first, protocol.Error):
                refused += first.code == "too_many_sessions"
                closes[first.code] += 1
                await ws.close()
            else:
                accepted.append(ws)
        if accepted:  # a ping flood on one accepted session (its pongs drained meanwhile)
            ws = accepted[0]

            async def drain():
                async for _ in ws:
                    pass

            drainer = asyncio.create_task(drain())
            try:
                async with asyncio.timeout(60):
                    for _ in range(2000):
                        await ws.send(protocol.Ping().encode())
                        pings += 1
            except (TimeoutError, ConnectionClosed):
                pass
            drainer.cancel()
        for ws in accepted:
            await ws.close()
        return {"accepted": len(accepted), "refused_too_many_sessions": refused,
                "outcomes": dict(closes), "pings_flooded": pings}

    from diffvoice.latency_bench.source_addr import use_source_ip

    use_source_ip(ip)
    _, _, flooded = await asyncio.gather(seeds(), huge(), flood())
    return {"requests": {f"{k[0]}:{'ok' if k[1] else 'unexpected'}": v
                         for k, v in statuses.items()},
            "unexpected": sum(v for k, v in statuses.items() if not k[1]), "flood": flooded}


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    turns = scale["iso_legit_turns"]
    # one unmeasured call of each protocol first: the rounds compare a warm server with and
    # without abuse, not a cold start (first-call costs) with a warm one
    warmup = await legit_calls(ctx, 2, 1)
    async with PingProbe(ctx) as quiet_probe:
        quiet = await legit_calls(ctx, 2, turns)
    async with PingProbe(ctx) as probe:
        t0 = time.monotonic()
        abused, abuse = await asyncio.gather(legit_calls(ctx, 2, turns),
                                             _abuse(ctx, scale, next_ip()))
        elapsed = time.monotonic() - t0
    after = await settled(ctx, baseline=baseline)
    rtt = probe.summary()
    flood = abuse["flood"]
    quiet_ms, abused_ms = (turn_summary(quiet)["server_ms_p99"],
                           turn_summary(abused)["server_ms_p99"])
    ratio = abused_ms / quiet_ms if quiet_ms and abused_ms else None
    checks = [
        check("quiet round: every legit turn answered", all(map(answered, quiet)),
              f"{sum(map(answered, quiet))} of {len(quiet)}"),
        check("abused round: every legit turn answered", all(map(answered, abused)),
              f"{sum(map(answered, abused))} of {len(abused)}"),
        check(f"/ws ping round-trip p99 < {RTT_GOAL_MS:.0f} ms during the abuse",
              rtt["p99_ms"] < RTT_GOAL_MS and rtt["error"] is None,
              f"p50 {rtt['p50_ms']} / p99 {rtt['p99_ms']} / max {rtt['max_ms']} ms over "
              f"{rtt['pings']} pings"),
        check(f"legit server_ms p99 in the abused round <= {SERVER_MS_RATIO:g}x the quiet "
              "round", ratio is not None and ratio <= SERVER_MS_RATIO,
              f"quiet p99 {quiet_ms} ms, abused p99 {abused_ms} ms (browser turns): ratio "
              f"{None if ratio is None else round(ratio, 2)}"),
        check("every abusive request got its documented status", abuse["unexpected"] == 0,
              json.dumps(abuse["requests"])),
        check("the socket flood was capped per IP (1013 too_many_sessions)",
              flood["accepted"] <= scale["per_ip"] and flood["refused_too_many_sessions"] ==
              scale["iso_flood_sockets"] - flood["accepted"], json.dumps(flood)),
        *leak_checks(after, baseline, "after isolation"),
    ]
    return {"warmup": turn_summary(warmup), "quiet": turn_summary(quiet),
            "abused": turn_summary(abused),
            "quiet_rtt": quiet_probe.summary(), "abused_rtt": rtt, "abuse": abuse,
            "abuse_elapsed_s": round(elapsed, 1), "checks": checks}
