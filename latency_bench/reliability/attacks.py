"""Attacks: issue 39's ten findings re-run against the real server while two callers speak.

Contract: `await run(ctx, scale)`:
1. baseline: `atk_quiet_turns`-turn browser + Twilio calls (their server_ms) while three rounds
   of `atk_innocent` innocent greedy /v1 requests run (the first's answers and latency are the
   reference), the same innocent load as attack phases 1-3 carry, but no attack;
2. then one legitimate browser caller and one Twilio caller call again and again
   (`atk_legit_turns` turns a call; common.one_call) while the phases below run one after
   another, every socket attack from a loopback IP of its own (attack_api, attack_phone,
   attack_sockets, attack_booking say what each sends). The Twilio caller starts no new call
   while the phone cap is being filled (finding 5: a full cap refusing it is the documented
   outcome, not another client's fault);
3. one check per finding, named from the issue ("1 one request fails its batch: ..."): it
   passes only if the attack got its documented outcome AND every legitimate turn that
   overlapped its phase was answered (`answered`); plus: every legitimate turn answered, 0
   answers of 5xx / close 1011 to anything sent, the browser caller's server_ms p99 during the
   attacks <= 2x the quiet one (not judged when `atk_quiet_turns` is 0), the engine's worker
   never held longer than 100 ms by one request's preparation
   (diffvoice_engine_worker_prepare_max_ms), leak gauges back to 0.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.client import connect

from diffvoice.latency_bench.reliability import attack_api, attack_phone, attack_sockets
from diffvoice.latency_bench.reliability.attack_booking import booking_theft, cancel_prompts
from diffvoice.latency_bench.reliability.common import (
    Ctx,
    answered,
    check,
    health,
    leak_checks,
    legit_calls,
    metrics,
    next_ip,
    one_call,
    settled,
    turn_summary,
)
from diffvoice.voice.transport import protocol

PREPARE_GOAL_MS = 100.0
SERVER_MS_RATIO = 2.0
RSS_GOAL_MB = 100.0  # growth while flooding audio (the issue: +1.4 GB from one socket)
CLOSE_WITHIN_S = 10.0  # a flooding call is closed within this of its first frame
PREPARE = "diffvoice_engine_worker_prepare_max_ms"
RSS = "process_resident_memory_bytes"
CORPUS_CACHE = Path("~/.cache/diffvoice/bench-corpus").expanduser()


class LegitCallers:
    """One browser and one Twilio caller, calling again and again until `stop()`."""

    def __init__(self, ctx: Ctx, turns: int, max_calls: int = 500) -> None:
        self.ctx, self.turns, self.max_calls = ctx, turns, max_calls
        self.records: list[tuple[float, float, str, Any]] = []  # (start, end, protocol, turn)
        self.phone_open = asyncio.Event()
        self.phone_open.set()
        self._stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._loop(p, k)) for k, p in
                       enumerate(("browser", "twilio"))]

    async def _loop(self, protocol_name: str, k: int) -> None:
        rng = np.random.default_rng(39 + k)
        for i in range(self.max_calls):
            if protocol_name == "twilio":
                await self.phone_open.wait()
            if self._stop.is_set():
                return
            picks = [self.ctx.prompts[int(j)] for j in
                     rng.integers(0, len(self.ctx.prompts), self.turns)]
            last = time.monotonic()

            def record(turn, protocol_name=protocol_name) -> None:
                nonlocal last
                now = time.monotonic()
                self.records.append((last, now, protocol_name, turn))
                last = now

            turns = await one_call(self.ctx, picks, protocol_name, 100 + 2 * i + k,
                                   pause_s=1.0, on_turn=record)
            if not any(t.status == "ok" for t in turns):
                await asyncio.sleep(1.0)  # a refused call is not retried at once

    async def stop(self) -> None:
        self._stop.set()
        self.phone_open.set()
        await asyncio.gather(*self._tasks)

    def during(self, t0: float, t1: float) -> list:
        return overlapping(self.records, t0, t1)


def overlapping(records, t0: float, t1: float) -> list:
    """The turns of (start, end, protocol, turn) records that overlapped [t0, t1]."""
    return [turn for start, end, _, turn in records if start < t1 and end > t0]


def server_ms(turns) -> list[float]:
    return [float(t.server["server_ms"]) for t in turns
            if answered(t) and isinstance(t.server.get("server_ms"), (int, float))]


def p99(values: list[float]) -> float | None:
    return round(float(np.percentile(values, 99)), 1) if values else None


def _log_tail(ctx: Ctx, offset: int) -> str:
    path = ctx.server.log_path
    if not path:
        return ""
    with open(path, "rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", "replace")


def _log_size(ctx: Ctx) -> int:
    return ctx.server.log_path.stat().st_size if ctx.server.log_path else 0


async def _flood(ctx: Ctx, scale: dict) -> dict[str, Any]:
    """4: audio floods on /ws (several sockets from one IP) and on a Twilio stream."""
    before = (await metrics(ctx))[RSS]
    ip = next_ip()
    socks = min(scale["atk_flood_sockets"], scale["per_ip"])
    ws, phone = await asyncio.gather(
        asyncio.gather(*(attack_sockets.ws_audio_flood(ctx, ip, scale["atk_flood_frames"], 20.0)
                         for _ in range(socks))),
        attack_phone.media_flood(ctx, scale["atk_flood_frames"], 20.0))
    peak = (await metrics(ctx))[RSS]
    await asyncio.sleep(3)
    after = (await metrics(ctx))[RSS]
    growth = (max(peak, after) - before) / 2**20
    ok = (all(f["error"] == "audio_too_fast" and f["close"] == 1008
              and (f.get("closed_after_s") or 1e9) <= CLOSE_WITHIN_S for f in ws)
          and phone["close"] == 1008 and phone["reason"] == "audio_too_fast"
          and (phone.get("closed_after_s") or 1e9) <= CLOSE_WITHIN_S and growth <= RSS_GOAL_MB)
    return {"ok": ok, "ws": ws, "phone": phone, "rss_growth_mb": round(growth, 1),
            "server_faults": sum(f["close"] == 1011 for f in ws) + (phone["close"] == 1011),
            "detail": f"/ws x{socks}: " + ", ".join(
                f"{f['error']}/{f['close']} after {f['audio_s_sent']} s of audio sent in "
                f"{f.get('closed_after_s')} s" for f in ws)
            + f"; Twilio: {phone['close']} {phone['reason']!r} after {phone['audio_s_sent']} s "
              f"sent in {phone.get('closed_after_s')} s; RSS +{growth:.1f} MB (goal <= "
              f"{RSS_GOAL_MB:.0f}; closes within {CLOSE_WITHIN_S:.0f} s; sent = handed to the "
              "socket before the close was read)"}


async def _stream_token(ctx: Ctx, scale: dict, legit: LegitCallers) -> dict[str, Any]:
    """5: a replayed stream token, then the phone cap filled beside a browser caller."""
    replay = await attack_phone.token_replay(ctx, scale["atk_replays"])
    replays_ok = replay["first"] == "open" and all(
        code == 1008 and reason in ("call already has a stream",
                                    "stream token missing or invalid")
        for code, reason in replay["replays"])
    cap = scale.get("max_phone_calls") or max(1, scale["max_sessions"] // 2)

    async def browser_probe() -> Any:
        async with connect(ctx.ws, ping_interval=None, open_timeout=30,
                                          local_addr=(next_ip(), 0)) as ws:
            await ws.send(protocol.SessionStart(config={}).encode())
            first = protocol.decode_server(await asyncio.wait_for(ws.recv(), 30))
            return type(first).__name__ if not isinstance(first, protocol.Error) else first.code

    legit.phone_open.clear()
    await asyncio.sleep(0.3)  # a legitimate call between its webhook and its stream gets in
    sessions = (await health(ctx))["active_sessions"]
    try:
        full = await attack_phone.phone_cap(ctx, cap, scale["atk_phone_extra"], browser_probe)
        for _ in range(50):  # the filled lines are free again (each call's teardown) first
            if (await health(ctx))["active_sessions"] <= sessions:
                break
            await asyncio.sleep(0.2)
    finally:
        legit.phone_open.set()
    refused_ok = all(k == "1013 phone lines busy" for k in full["refusals"])
    cap_ok = (full["admitted"] <= cap and refused_ok and sum(full["refusals"].values())
              >= scale["atk_phone_extra"] and full["browser"] == "SessionStarted")
    closes = [c for c, _ in replay["replays"]] + [k.split()[0] for k in full["refusals"]]
    return {"ok": replays_ok and cap_ok, "replay": replay, "cap": cap, "filled": full,
            "server_faults": sum(str(c) == "1011" for c in closes),
            "detail": f"one TwiML token: first stream {replay['first']}, "
                      f"{len(replay['replays'])} replays -> "
                      f"{sorted({f'{c} {r}' for c, r in replay['replays']})}; phone cap {cap}: "
                      f"{full['admitted']} of {full['twiml_streams']} streams admitted, refused "
                      f"{json.dumps(full['refusals'])}; a browser caller meanwhile: "
                      f"{full['browser']}"}


async def _cross_site(ctx: Ctx) -> dict[str, Any]:
    """7: the HTTP half (attack_api) and a DNS-rebinding /ws upgrade."""
    http = await attack_api.cross_site_http(ctx)
    ws = await attack_sockets.ws_rebinding(ctx, next_ip())
    ws_ok = ws["error"] == "origin_not_allowed" and ws["close"] == 1008 or str(
        ws["close"]).startswith("HTTP 403")
    return {"ok": http["ok"] and ws_ok, "server_faults": http["server_faults"],
            "detail": f"{http['detail']}; /ws with Host and Origin evil.example:PORT -> "
                      f"{ws['error']} / {ws['close']}"}


async def _slow(ctx: Ctx, scale: dict) -> dict[str, Any]:
    """8: half-sent heads and /ws upgrades from one IP; innocent requests meanwhile."""
    limit = scale["header_timeout_s"]

    async def during() -> dict:
        await asyncio.sleep(0.5)
        return await attack_api.innocent_round(ctx, scale["atk_concurrency"],
                                               scale["atk_concurrency"])

    got = await attack_sockets.slow_clients(ctx, next_ip(), scale["atk_slow_heads"],
                                            scale["atk_slow_upgrades"], limit + 10.0, during)
    inn = got.pop("during")
    late = got["closed_after_s_max"]
    ok = (got["still_open"] == 0 and got["connect_failed"] == 0 and late is not None
          and late <= limit + 2.0 and inn["failed"] == 0)
    return {"ok": ok, **got, "innocent_statuses": inn["statuses"],
            "server_faults": sum(s >= 500 for s in inn["statuses"]),
            "detail": f"{got['opened']} held ({scale['atk_slow_heads']} heads, "
                      f"{scale['atk_slow_upgrades']} upgrades): {got['closed']} closed by the "
                      f"server after {got['closed_after_s_min']}-{late} s (--header-timeout-s "
                      f"{limit}), {got['still_open']} still open, {got['connect_failed']} "
                      f"refused at connect; innocent /v1 meanwhile: "
                      f"{sorted(inn['statuses'])}"}


async def _bad_utf8(ctx: Ctx, scale: dict) -> dict[str, Any]:
    """9: non-UTF-8 text frames: 1007 each, one log line each, no traceback."""
    offset = _log_size(ctx)
    codes = await attack_sockets.bad_utf8(ctx, scale["atk_bad_utf8"])
    await asyncio.sleep(0.5)
    tail = _log_tail(ctx, offset)
    lines = sum("not valid UTF-8" in line for line in tail.splitlines())
    tracebacks = tail.count("Traceback (most recent call last)")
    n = len(codes)
    ok = all(c == 1007 for c in codes) and lines <= n and tracebacks == 0
    return {"ok": ok, "server_faults": sum(c == 1011 for c in codes),
            "detail": f"{codes.count(1007)} of {n} closed 1007 (others: "
                      f"{[c for c in codes if c != 1007][:3]}); {lines} log lines about them, "
                      f"{tracebacks} tracebacks"}


def _figures(result: dict[str, Any]) -> dict[str, Any]:
    """A phase's result for the report: no per-request lists (answers, statuses, replays)."""
    out = {k: v for k, v in result.items() if k not in ("ok", "detail", "innocent_statuses")}
    if "innocent" in out:
        out["innocent"] = {k: out["innocent"][k] for k in ("failed", "changed_vs_quiet",
                                                           "p50_ms", "p99_ms")}
    if isinstance(out.get("replay"), dict):
        closes: dict[str, int] = {}
        for code, reason in out["replay"]["replays"]:
            closes[f"{code} {reason}"] = closes.get(f"{code} {reason}", 0) + 1
        out["replay"] = {"first": out["replay"]["first"], "replays": closes}
    return out


async def _phase(name: str, work, phases: list) -> dict[str, Any]:
    t0 = time.monotonic()
    try:
        result = await work
    except Exception as e:  # an attack that breaks is a failed check, not a hidden one
        result = {"ok": False, "detail": f"{type(e).__name__}: {e}"[:300]}
    result["elapsed_s"] = round(time.monotonic() - t0, 1)
    phases.append((name, t0, time.monotonic(), result))
    return result


NAMES = {
    "1": "1 one request fails its batch: maxLength 1e30 + tool_choice required, innocent "
         "requests beside it all 200 and unchanged",
    "2": "2 one request holds the engine: 5,000 tools refused 400 naming the limit, at once",
    "3": "3 ReDoS: a (\\d?\\d?\\d?\\d?\\d?:?){8}y pattern refused 400, at once",
    "4": "4 unbounded audio ingestion: 64 KiB /ws frames and 6 s Twilio media flooded, closed "
         "audio_too_fast (1008), RSS bounded",
    "5": "5 reusable stream credential: a TwiML token replayed refused 1008, streams past "
         "--max-phone-calls refused 1013, a browser caller still admitted",
    "6": "6 client mistakes answered 500: the 13 cases (7 schema values in tools and in "
         "response_format, chat_template_kwargs namespace) each 400 naming the field",
    "7": "7 cross-site reach: text/plain 415, foreign Origin 403, DNS-rebinding /ws refused",
    "8": "8 slow clients never reaped: half-sent heads and /ws upgrades closed within "
         "--header-timeout-s, innocent requests answered meanwhile",
    "9": "9 log flooding: non-UTF-8 /ws text frames closed 1007, one log line each, no traceback",
    "10": "10 any caller cancels anyone's booking: caller B's spoken cancel removes B's own "
          "booking, never caller A's or a phone caller's of the same name",
}


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    cancel = await asyncio.to_thread(cancel_prompts, Path(scale.get("corpus_cache")
                                                          or CORPUS_CACHE))
    if scale.get("atk_warmup"):
        await legit_calls(ctx, 2, 1)
    # the baseline compares like with like: the callers' turns with the same innocent /v1 load
    # as attack phases 1-3 carry (one innocent round each), but no attack
    calls = (asyncio.create_task(legit_calls(ctx, 2, scale["atk_quiet_turns"]))
             if scale["atk_quiet_turns"] else None)  # short: no baseline (ratio not judged)
    quiet_api = await attack_api.innocent_round(ctx, scale["atk_innocent"],
                                                scale["atk_concurrency"])
    if calls is not None:
        for _ in range(2):
            await attack_api.innocent_round(ctx, scale["atk_innocent"], scale["atk_concurrency"])
    quiet = await calls if calls is not None else []
    legit = LegitCallers(ctx, scale["atk_legit_turns"])
    phases: list = []
    t_start = time.monotonic()
    try:
        await _phase("1", attack_api.batch_fault(ctx, scale, quiet_api), phases)
        await _phase("2", attack_api.many_tools_attack(ctx, scale, quiet_api), phases)
        await _phase("3", attack_api.redos_attack(ctx, scale, quiet_api), phases)
        await _phase("6", attack_api.client_mistakes(ctx), phases)
        await _phase("7", _cross_site(ctx), phases)
        await _phase("9", _bad_utf8(ctx, scale), phases)
        await _phase("4", _flood(ctx, scale), phases)
        await _phase("5", _stream_token(ctx, scale, legit), phases)
        await _phase("8", _slow(ctx, scale), phases)
        await _phase("10", booking_theft(ctx, cancel, scale["atk_booking_attempts"]), phases)
    finally:
        t_end = time.monotonic()
        await legit.stop()
    after = await settled(ctx, baseline=baseline)
    checks, results = [], {}
    for name, t0, t1, result in sorted(phases, key=lambda p: int(p[0])):
        turns = legit.during(t0, t1)
        good = sum(map(answered, turns))
        checks.append(check(NAMES[name], result["ok"] and good == len(turns),
                            f"{result['detail']}; legit turns overlapping: {good} of "
                            f"{len(turns)} answered ({result['elapsed_s']} s)"))
        results[name] = _figures(result)
    attacked = legit.during(t_start, t_end)
    quiet_ms, attacked_ms = server_ms(quiet), server_ms(attacked)
    ratio = (p99(attacked_ms) / p99(quiet_ms)) if quiet_ms and attacked_ms else None
    faults = sum(r.get("server_faults", 0) for _, _, _, r in phases)
    prepare_ms = after.get(PREPARE)
    checks += [
        check("legit callers (browser + Twilio) answered every turn throughout the attacks",
              all(map(answered, attacked)) and len(attacked) >= 2,
              f"{sum(map(answered, attacked))} of {len(attacked)} "
              f"({', '.join(turn_summary(attacked)['failed'][:3])})"),
        check("0 answers of 5xx / close 1011 to any attack or innocent request", faults == 0,
              f"{faults}"),
        *([check(f"legit server_ms p99 during the attacks <= {SERVER_MS_RATIO:g}x the quiet "
                 "baseline", ratio is not None and ratio <= SERVER_MS_RATIO,
                 f"quiet p99 {p99(quiet_ms)} ms ({len(quiet_ms)} turns), attacked p99 "
                 f"{p99(attacked_ms)} ms ({len(attacked_ms)} turns): ratio "
                 f"{None if ratio is None else round(ratio, 2)}")]
          if scale["atk_quiet_turns"] else []),  # short: no quiet round, nothing to judge
        check(f"no request held the engine worker > {PREPARE_GOAL_MS:.0f} ms of preparation",
              prepare_ms is not None and prepare_ms <= PREPARE_GOAL_MS, f"{prepare_ms} ms"),
        *leak_checks(after, baseline, "after attacks"),
    ]
    return {"quiet": turn_summary(quiet), "attacked": turn_summary(attacked),
            "quiet_server_ms_p99": p99(quiet_ms), "attacked_server_ms_p99": p99(attacked_ms),
            "quiet_innocent_ms": [quiet_api["p50_ms"], quiet_api["p99_ms"]],
            "worker_prepare_max_ms": prepare_ms, "attacks": results,
            "attack_elapsed_s": round(t_end - t_start, 1), "checks": checks}
