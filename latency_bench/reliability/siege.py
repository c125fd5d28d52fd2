"""Siege: issue 54's findings re-run against the real server while two callers speak and an
innocent API client checks its answers throughout, with an API flood phase.

Contract: `await run(ctx, scale)`:
1. baseline: `atk_quiet_turns`-turn browser + Twilio calls while the innocent client runs (its
   answers are the reference), no attack;
2. then one browser and one Twilio caller call again and again (attacks.LegitCallers), the
   innocent client goes on (one greedy request at a time from its own loopback address), and a
   lag probe reads the server's event-loop lag (diffvoice_event_loop_lag_seconds{stat="max"},
   the worst since its previous read) every `sg_probe_s`, while the phases below run one after
   another, each attack from loopback addresses of its own (the socket-level ones, N3, N5,
   N6, N10-N12, in latency_bench.reliability.siege_sockets):
   - flood (N4): `sg_flood` concurrent `max_tokens: sg_long_tokens, ignore_eos` requests from
     one address, and `sg_unread` streams from `sg_unread_ips` addresses that read their first
     chunk and then nothing; after `sg_flood_s` every connection still open is closed;
   - N1: `sg_n1` concurrent copies of each N1 request (the nested-quantifier pattern under
     x-diffvoice-context mentioned, a lookahead pattern, a 2,000-value mentioned enum with 400
     one-character messages): each answered 200 or 400 within FAST_MS;
   - N2: 8,000 one-character messages; 600 KB of tool_call arguments: 400 within FAST_MS;
   - N3: `sg_slow_bodies` POSTs from one address declaring 1,000 bytes and sending one, and
     `sg_silent_streams` Twilio stream sockets that never send `start`; meanwhile /healthz, an
     innocent /v1 request and a signed Twilio webhook from other addresses must get 200; every
     slow socket closed (408 / 429 / 1013 / 1008) within the body / handshake timeout + 5 s;
   - N5: a /ws ping flood and a /ws flood of empty binary frames: each closed 1008
     message_rate within `sg_flood_close_s`;
   - N6: `sg_silent_browsers` silent browser sessions from `sg_n6_ips` addresses, then a
     phone call (webhook + stream): admitted (and the legit browser caller still gets in);
   - N9: x-diffvoice-aliases {"a": 5} and [1]: 400 naming the keyword;
   - N10: `sg_cut_bodies` POSTs cut mid-body: at most one log line each, no traceback;
   - N11: Host evil.example on /healthz, /metrics, /openapi.json: refused (4xx), never 200;
   - N12: per_ip + 2 /ws sessions from one address, each with its own X-Forwarded-For: the
     per-IP cap still refuses the extra ones.
   N7 (a call whose output stalls), N8 (a webhook replayed after a restart) and N13 (one owner
   booking the week) need a stalled loop, a restart or dozens of spoken bookings: their
   regression tests cover them (tests/voice/transport/test_output_stall.py,
   tests/voice/telephony/, tests/agent/test_book.py), not this part.
3. one check per phase: its documented outcome, every legit turn overlapping it answered, every
   innocent request in it 200 and unchanged, the probe's lag in it <= LAG_GOAL_MS; plus 0 5xx /
   1011 to anything sent, the browser caller's server_ms p99 during the siege <= 2x the quiet
   one, leak gauges back to 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from diffvoice.latency_bench.reliability import siege_sockets
from diffvoice.latency_bench.reliability.attack_api import (
    Reply,
    answer_of,
    chat_body,
    error_of,
    innocent_content,
    post,
)
from diffvoice.latency_bench.reliability.attacks import LegitCallers, _phase, p99, server_ms
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
from diffvoice.latency_bench.reliability.siege_sockets import count, port

LAG_GOAL_MS = 100.0
SERVER_MS_RATIO = 2.0
FAST_MS = 5000.0  # a refused or counted request is answered within this, however hostile
LAG = 'diffvoice_event_loop_lag_seconds{stat="max"}'
N1_PATTERN = r"(\d?\d?\d?\d?\d?:?){6}y"
N1_LOOKAHEAD = r"^(?=00:0[0-4])(?:\d?:?){50}y"


class Innocent:
    """One greedy request at a time from its own address until stop(); answers by content."""

    def __init__(self, ctx: Ctx, reference: dict[int, str] | None = None) -> None:
        self.ctx, self.ip = ctx, next_ip()
        self.reference = reference if reference is not None else {}
        self.records: list[tuple[float, float, int, bool]] = []  # (t0, t1, status, unchanged)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        model = self.ctx.settings["model_name"]
        i = 0
        while not self._stop.is_set():
            k = i % 8
            t0 = time.monotonic()
            reply = await post(self.ctx, "/v1/chat/completions",
                               chat_body(model, innocent_content(k)), ip=self.ip)
            answer = answer_of(reply) if reply.status == 200 else None
            if answer is not None:
                self.reference.setdefault(k, answer)
            same = answer is not None and self.reference.get(k) == answer
            self.records.append((t0, time.monotonic(), reply.status, same))
            i += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), 0.3)

    async def stop(self) -> None:
        self._stop.set()
        await self._task

    def during(self, t0: float, t1: float) -> list[tuple[int, bool]]:
        return [(s, same) for a, b, s, same in self.records if a < t1 and b > t0]


class LagProbe:
    """The server's worst event-loop lag per `every_s` window, read from /metrics."""

    def __init__(self, ctx: Ctx, every_s: float) -> None:
        self.ctx, self.every_s = ctx, every_s
        self.samples: list[tuple[float, float, float]] = []  # (window start, end, lag ms)
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._loop())

    async def _loop(self) -> None:
        last = time.monotonic()
        await metrics(self.ctx)  # starts the first window
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.every_s)
            with contextlib.suppress(Exception):  # a failed read is a gap, not a crash
                lag = (await metrics(self.ctx)).get(LAG)
                now = time.monotonic()
                if lag is not None:
                    self.samples.append((last, now, lag * 1000))
                last = now

    async def stop(self) -> None:
        self._stop.set()
        await self._task

    def worst(self, t0: float, t1: float) -> float | None:
        lags = [ms for a, b, ms in self.samples if a < t1 and b > t0]
        return round(max(lags), 1) if lags else None


def _chat(ctx: Ctx, messages: list[dict], extra: dict | None = None, max_tokens: int = 8
          ) -> bytes:
    return json.dumps({"model": ctx.settings["model_name"], "max_tokens": max_tokens,
                       "temperature": 0, "messages": messages, **(extra or {})}).encode()


def _tool(schema: dict) -> dict:
    return {"tool_choice": "required", "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": schema},
                                    "required": ["x"]}}}]}


async def _api_flood(ctx: Ctx, scale: dict) -> dict[str, Any]:
    """N4: one client's long requests, and streams nobody reads."""
    ip = next_ip()
    body = _chat(ctx, [{"role": "user", "content": "Tell me everything about your office."}],
                 {"ignore_eos": True}, max_tokens=scale["sg_long_tokens"])
    longs = [asyncio.create_task(post(ctx, "/v1/chat/completions", body, ip=ip,
                                      timeout_s=scale["sg_flood_s"]))
             for _ in range(scale["sg_flood"])]
    stream_body = _chat(ctx, [{"role": "user", "content": "Describe the office."}],
                        {"ignore_eos": True, "stream": True}, max_tokens=scale["sg_long_tokens"])
    ips = [next_ip() for _ in range(scale["sg_unread_ips"])]
    opened: list[Any] = []

    async def unread(k: int) -> int:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port(ctx), local_addr=(ips[k % len(ips)], 0))
        except OSError:
            return -1
        opened.append(writer)
        writer.write((f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(stream_body)}"
                      f"\r\n\r\n").encode() + stream_body)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), scale["sg_flood_s"])
        parts = line.split()
        return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1  # then unread

    unread_statuses = await asyncio.gather(
        *(unread(k) for k in range(scale["sg_unread"])), return_exceptions=True)
    replies = await asyncio.gather(*longs)
    for writer in opened:
        writer.close()
    running = f"running at {scale['sg_flood_s']:.0f} s"  # admitted, closed by the harness
    longs_out = [str(r.status) if r.status != -1 else running if r.text == "TimeoutError"
                 else "no answer" for r in replies]
    unread_out = [str(s) if isinstance(s, int) and s != -1 else running
                  if isinstance(s, TimeoutError) else "no answer" for s in unread_statuses]
    limit = int(scale.get("api_client_concurrency", 8))
    admitted = sum(s in ("200", running) for s in longs_out)
    ok = (all(s in ("200", "429", running) for s in longs_out + unread_out)
          and admitted <= limit and longs_out.count("429") >= scale["sg_flood"] - limit)
    return {"ok": ok, "server_faults": sum(s[0] == "5" for s in longs_out + unread_out),
            "long": count(longs_out), "unread": count(unread_out),
            "detail": f"{scale['sg_flood']} long requests from one address: {count(longs_out)} "
                      f"(at most {limit} admitted); {scale['sg_unread']} unread streams from "
                      f"{scale['sg_unread_ips']} addresses: {count(unread_out)}"}


async def _n1(ctx: Ctx, scale: dict) -> dict[str, Any]:
    bodies = {
        "nested quantifiers, mentioned": _chat(ctx, [{"role": "user", "content": "at 10:30"}],
                                               _tool({"type": "string", "pattern": N1_PATTERN,
                                                      "x-diffvoice-context": "mentioned"})),
        "lookahead": _chat(ctx, [{"role": "user", "content": "00:01"}],
                           _tool({"type": "string", "pattern": N1_LOOKAHEAD,
                                  "x-diffvoice-context": "mentioned"})),
        "2,000-value mentioned enum, 400 messages": _chat(
            ctx, [{"role": ("user", "assistant")[i % 2], "content": "x"} for i in range(399)]
            + [{"role": "user", "content": "y"}],
            _tool({"type": "string", "enum": [f"v{i:04d}" for i in range(2000)],
                   "x-diffvoice-context": "mentioned"})),
    }
    results: dict[str, list[Reply]] = {}
    for name, body in bodies.items():
        ip = next_ip()
        results[name] = list(await asyncio.gather(*(
            post(ctx, "/v1/chat/completions", body, ip=ip) for _ in range(scale["sg_n1"]))))
    replies = [r for rs in results.values() for r in rs]
    slowest = max(r.ms for r in replies)
    ok = all(r.status in (200, 400, 429) for r in replies) and slowest <= FAST_MS
    return {"ok": ok, "server_faults": sum(r.status >= 500 for r in replies),
            "slowest_ms": round(slowest),
            "detail": "; ".join(f"{name}: {count([r.status for r in rs])}"
                                for name, rs in results.items())
            + f"; slowest {slowest:.0f} ms (goal <= {FAST_MS:.0f})"}


async def _n2(ctx: Ctx) -> dict[str, Any]:
    tiny = [{"role": ("user", "assistant")[i % 2], "content": "a"} for i in range(7999)] + \
        [{"role": "user", "content": "a"}]
    args = [{"role": "user", "content": "book it"},
            {"role": "assistant", "content": None, "tool_calls": [{
                "id": "c1", "type": "function", "function": {
                    "name": "book", "arguments": json.dumps({"note": "x" * 600_000})}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "user", "content": "thanks"}]
    replies = {name: await post(ctx, "/v1/chat/completions", _chat(ctx, m), ip=next_ip())
               for name, m in (("8,000 messages", tiny), ("600 KB tool_call arguments", args))}
    ok = all(r.status == 400 and "max_prompt_chars" in error_of(r) and r.ms <= FAST_MS
             for r in replies.values())
    return {"ok": ok, "server_faults": sum(r.status >= 500 for r in replies.values()),
            "detail": "; ".join(f"{k}: {r.status} in {r.ms:.0f} ms ({error_of(r)[:60]!r})"
                                for k, r in replies.items())}


async def _n9(ctx: Ctx) -> dict[str, Any]:
    replies = []
    for aliases in ({"a": 5}, [1]):
        schema = {"type": "string", "enum": ["a"], "x-diffvoice-context": "mentioned",
                  "x-diffvoice-aliases": aliases}
        replies.append(await post(ctx, "/v1/chat/completions",
                                  _chat(ctx, [{"role": "user", "content": "a"}],
                                        _tool(schema)), ip=next_ip()))
    ok = all(r.status == 400 and "x-diffvoice-aliases" in error_of(r) for r in replies)
    return {"ok": ok, "server_faults": sum(r.status >= 500 for r in replies),
            "detail": "; ".join(f"{r.status} {error_of(r)[:70]!r}" for r in replies)}


NAMES = {
    "flood": "N4 API flood: long ignore_eos requests from one client past its concurrency get "
             "429, unread streams hold no live slot",
    "N1": "N1 hostile patterns / 2,000-value mentioned enum x 400 messages: answered 200/400 "
          "within 5 s each",
    "N2": "N2 prompt parts nobody counted: 8,000 messages, 600 KB tool_call arguments refused "
          "400 (max_prompt_chars) at once",
    "N3": "N3 slow bodies and silent Twilio sockets from one address: closed within the "
          "timeout, /healthz, /v1 and webhooks from others answered 200",
    "N5": "N5 message floods: /ws pings and empty frames closed 1008 message_rate",
    "N6": "N6 silent browser sessions cannot lock out a phone caller",
    "N9": "N9 x-diffvoice-aliases of the wrong shape: 400 naming the keyword",
    "N10": "N10 POSTs cut mid-body: at most one log line each, no traceback",
    "N11": "N11 DNS rebinding: Host evil.example refused on /healthz, /metrics, /openapi.json, "
           "/ws",
    "N12": "N12 X-Forwarded-For does not bypass the per-IP cap",
}


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    if scale.get("atk_warmup"):
        await legit_calls(ctx, 2, 1)
    reference: dict[int, str] = {}
    probe = LagProbe(ctx, scale["sg_probe_s"])
    innocent = Innocent(ctx, reference)
    quiet = await legit_calls(ctx, 2, scale["atk_quiet_turns"]) \
        if scale["atk_quiet_turns"] else []
    quiet_end = time.monotonic()
    legit = LegitCallers(ctx, scale["atk_legit_turns"])
    phases: list = []
    t_start = time.monotonic()
    try:
        await _phase("flood", _api_flood(ctx, scale), phases)
        await _phase("N1", _n1(ctx, scale), phases)
        await _phase("N2", _n2(ctx), phases)
        await _phase("N3", siege_sockets.n3(ctx, scale), phases)
        await _phase("N5", siege_sockets.n5(ctx, scale), phases)
        await _phase("N6", siege_sockets.n6(ctx, scale), phases)
        await _phase("N9", _n9(ctx), phases)
        await _phase("N10", siege_sockets.n10(ctx, scale), phases)
        await _phase("N11", siege_sockets.n11(ctx), phases)
        await _phase("N12", siege_sockets.n12(ctx, scale), phases)
    finally:
        t_end = time.monotonic()
        await legit.stop()
        await innocent.stop()
        await probe.stop()
    after = await settled(ctx, baseline=baseline)
    checks, results = [], {}
    for name, t0, t1, result in phases:
        turns = legit.during(t0, t1)
        good = sum(map(answered, turns))
        inn = innocent.during(t0, t1)
        inn_ok = sum(s == 200 and same for s, same in inn)
        lag = probe.worst(t0, t1)
        ok = (result["ok"] and good == len(turns) and inn_ok == len(inn)
              and lag is not None and lag <= LAG_GOAL_MS)
        checks.append(check(NAMES[name], ok,
                            f"{result['detail']}; legit turns overlapping: {good} of "
                            f"{len(turns)} answered; innocent /v1: {inn_ok} of {len(inn)} 200 "
                            f"and unchanged; event-loop lag max {lag} ms (goal <= "
                            f"{LAG_GOAL_MS:.0f}); {result['elapsed_s']} s"))
        results[name] = {k: v for k, v in result.items() if k not in ("ok", "detail")}
        results[name].update(lag_max_ms=lag, legit_turns=len(turns), legit_answered=good,
                             innocent=len(inn), innocent_ok=inn_ok)
    sieged = legit.during(t_start, t_end)
    quiet_ms, sieged_ms = server_ms(quiet), server_ms(sieged)
    ratio = (p99(sieged_ms) / p99(quiet_ms)) if quiet_ms and sieged_ms else None
    faults = sum(r.get("server_faults", 0) for _, _, _, r in phases)
    inn_all = innocent.during(t_start, t_end)
    checks += [
        check("legit callers (browser + Twilio) answered every turn throughout the siege",
              all(map(answered, sieged)) and len(sieged) >= 2,
              f"{sum(map(answered, sieged))} of {len(sieged)} "
              f"({', '.join(turn_summary(sieged)['failed'][:3])})"),
        check("the innocent API client: every request 200 and its answer unchanged",
              inn_all and all(s == 200 and same for s, same in inn_all),
              f"{sum(s == 200 and same for s, same in inn_all)} of {len(inn_all)}"),
        check("0 answers of 5xx / close 1011 to any attack or innocent request",
              faults == 0 and all(s < 500 for s, _ in inn_all), f"{faults}"),
        *([check(f"legit server_ms p99 during the siege <= {SERVER_MS_RATIO:g}x the quiet "
                 "baseline", ratio is not None and ratio <= SERVER_MS_RATIO,
                 f"quiet p99 {p99(quiet_ms)} ms ({len(quiet_ms)} turns), sieged p99 "
                 f"{p99(sieged_ms)} ms ({len(sieged_ms)} turns): ratio "
                 f"{None if ratio is None else round(ratio, 2)}")]
          if scale["atk_quiet_turns"] else []),  # short: no quiet round, nothing to judge
        *leak_checks(after, baseline, "after the siege"),
    ]
    quiet_lag = [ms for a, b, ms in probe.samples if b <= quiet_end]
    return {"quiet": turn_summary(quiet), "sieged": turn_summary(sieged),
            "quiet_server_ms_p99": p99(quiet_ms), "sieged_server_ms_p99": p99(sieged_ms),
            "lag_max_ms_quiet": max(quiet_lag) if quiet_lag else None,
            "phases": results, "siege_elapsed_s": round(t_end - t_start, 1),
            "checks": checks}


