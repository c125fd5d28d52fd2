"""Realtime: malformed OpenAI-Realtime events on /v1/realtime while two live callers talk, the
socket-level limits, and memory per Realtime session.

Contract: `await run(ctx, scale)`, against the harness's server (/v1/realtime?model=<served>):
1. fuzz: `rt_malformed` or more malformed events and out-of-order sequences
   (realtime_cases, seeded) over `rt_sockets` sockets (each from its own loopback address,
   at most `rt_send_rate` messages a second, real-time silence appended in the background so
   the idle timeout leaves it alone), each event awaited before the next: every one must be
   answered by exactly one `error` event with its documented code naming the client's
   event_id (None where none could be read), every valid step of a sequence by its event and
   no error, and the socket must stay open (probed with input_audio_buffer.clear every
   PROBE_EVERY cases and at the end). Meanwhile two live callers speak `rt_live_turns` spoken
   prompts each over /v1/realtime (latency_bench.realtime_client: 20 ms frames as 24 kHz
   input_audio_buffer.append, server VAD): every turn must be answered (response.done
   `completed`, audible audio, a transcript, bot text) with a voice-to-voice figure. The
   server's event-loop lag (siege.LagProbe, /metrics) over this phase is checked against
   siege's LAG_GOAL_MS.
2. limits: an audio flood (1 s appends every 20 ms) must be closed 1008 `audio_too_fast` after
   an error event; a message flood (tiny events, as fast as they go) 1008 `message_rate` (the
   WebSocket layer closes it, without an error event: docs/protocol.md); `rt_idle_sockets`
   sockets that send nothing closed 1008 `idle_timeout` after an error event, within
   IDLE_SLACK_S of the server's idle timeout; a socket naming an unknown model refused with an
   error event (model_not_found) and 1008; a plain GET of /v1/realtime answered below 500.
3. memory: `rt_mem_warmup` then `rt_mem_sessions` Realtime sessions, `rt_mem_concurrency` at a
   time, each from its own address (session.update, five 100 ms appends, a text item, close);
   server RSS growth per measured session, as memory.py measures /ws (goal memory.GOAL_MB).
   The warm-up is long (150 sessions; RSS before it is reported too) because glibc's arenas
   take the first ~120-140 short sessions to fill (~0.3-0.4 MB each) and give memory back
   only in steps. A session refused `overloaded` because the lines of sessions whose clients
   just closed are not free yet (the server frees one when the call's pipeline has shut down)
   is opened again after BUSY_RETRY_S (counted: `mem_busy_retries`).
Plus: 0 closes 1011 and 0 HTTP 5xx anywhere, no traceback in the server log during the part,
leak gauges back to 0 afterwards.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from diffvoice.latency_bench.realtime_client import run_realtime_session
from diffvoice.latency_bench.reliability.common import (
    Ctx,
    answered,
    bench_config,
    check,
    leak_checks,
    metrics,
    next_ip,
    settled,
    turn_summary,
)
from diffvoice.latency_bench.reliability.memory import GOAL_MB, RSS, steady_growth
from diffvoice.latency_bench.reliability.realtime_cases import Case, Step, cases
from diffvoice.latency_bench.reliability.siege import LAG_GOAL_MS, LagProbe
from diffvoice.latency_bench.source_addr import use_source_ip
from diffvoice.latency_bench.turns import TurnResult

RATE = 24000  # audio/pcm
PROBE_EVERY = 10  # cases between two liveness probes on a fuzz socket
IDLE_SLACK_S = 3.0
BUSY_RETRY_S = 0.25  # an idle socket is closed within this of the idle timeout
EXAMPLES = 20


def realtime_url(ctx: Ctx, model: str | None = None) -> str:
    name = ctx.settings["model_name"] if model is None else model
    return ctx.server.ws_url("/v1/realtime?model=" + urllib.parse.quote(name, safe=""))


def _append(seconds: float) -> str:
    pcm = bytes(2 * int(seconds * RATE))
    return json.dumps({"type": "input_audio_buffer.append",
                       "audio": base64.b64encode(pcm).decode()})


@dataclass
class Tally:
    """What every socket of the part saw."""
    closes: Counter = field(default_factory=Counter)  # close code -> sockets
    http_5xx: int = 0
    busy: int = 0  # memory sessions refused overloaded and tried again
    connect_failures: list[str] = field(default_factory=list)

    def closed(self, code: Any) -> None:
        self.closes[str(code)] += 1

    def refused(self, exc: Exception) -> None:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        if isinstance(status, int) and status >= 500:
            self.http_5xx += 1
        if len(self.connect_failures) < 5:
            self.connect_failures.append(f"{type(exc).__name__}: {exc}"[:160])


class Conn:
    """One /v1/realtime socket: every server event into a queue (and `seen[type]`, the latest
    of each type); `<closed>` once the socket is closed."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.events: asyncio.Queue = asyncio.Queue()
        self.seen: dict[str, dict] = {}
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.closed_t: float | None = None
        self.recent: deque[str] = deque(maxlen=8)  # the latest event types (for mismatches)
        self.count: Counter = Counter()  # events received, by type
        self._task = asyncio.create_task(self._read())

    @classmethod
    async def open(cls, ctx: Ctx, tally: Tally, url: str | None = None,
                   subprotocol: bool = False) -> Conn | None:
        try:
            ws = await connect(url or realtime_url(ctx), max_size=None, ping_interval=None,
                               open_timeout=30, local_addr=(next_ip(), 0),
                               subprotocols=["realtime"] if subprotocol else None)
        except (OSError, InvalidStatus, TimeoutError) as e:
            tally.refused(e)
            return None
        return cls(ws)

    async def _read(self) -> None:
        try:
            async for message in self.ws:
                event = json.loads(message) if isinstance(message, str) else {
                    "type": "<binary>"}
                self.seen[event.get("type")] = event
                self.recent.append(str(event.get("type")))
                self.count[event.get("type")] += 1
                self.events.put_nowait(event)
        except (ConnectionClosed, ValueError):
            pass
        finally:
            self.closed_t = time.monotonic()
            self.close_code, self.close_reason = self.ws.close_code, self.ws.close_reason
            self.events.put_nowait({"type": "<closed>"})

    async def next(self, within_s: float) -> dict:
        event = await asyncio.wait_for(self.events.get(), max(0.0, within_s))
        if event["type"] == "<closed>":
            self.events.put_nowait(event)  # closed stays closed
        return event

    async def until(self, kind: str, within_s: float = 30.0) -> dict:
        """The next event of `kind`; an error event or the close first raises."""
        deadline = time.monotonic() + within_s
        while True:
            event = await self.next(deadline - time.monotonic())
            if event["type"] == kind:
                return event
            if event["type"] in ("error", "<closed>"):
                raise RuntimeError(f"waiting for {kind}: {json.dumps(event)[:200]} "
                                   f"(close {self.close_code} {self.close_reason})")

    async def close(self, tally: Tally) -> None:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.ws.close(), 10)
        await asyncio.gather(self._task, return_exceptions=True)
        tally.closed(self.close_code)


# ------------------------------------------------------------------ 1. fuzz + live callers

@dataclass
class Fuzz:
    malformed_sent: int = 0
    answered: int = 0  # by exactly one error with the documented code and event_id
    mismatches: int = 0
    valid_steps: int = 0
    valid_ok: int = 0
    skipped: int = 0  # steps skipped: what they referred to never came (e.g. no audio)
    probes: int = 0
    probes_ok: int = 0
    sockets_closed_early: list[str] = field(default_factory=list)
    families: dict[str, list[int]] = field(default_factory=dict)  # family -> [sent, answered]
    codes: Counter = field(default_factory=Counter)  # error codes answered
    examples: list[str] = field(default_factory=list)

    def miss(self, text: str) -> None:
        self.mismatches += 1
        if len(self.examples) < EXAMPLES:
            self.examples.append(text[:400])


def _show(payload: Any) -> str:
    text = payload if isinstance(payload, str) else repr(payload)
    return text if len(text) <= 160 else f"{text[:120]}... ({len(text)} chars)"


async def _expect(conn: Conn, step: Step, family: str, payload: Any, fuzz: Fuzz,
                  base: Counter) -> bool:
    """True when the step got its answer; else the mismatch is recorded. `base`: the event
    counts when the case began (a step with `nth` counts from there)."""
    deadline = time.monotonic() + step.timeout_s
    while True:
        if step.nth is not None and conn.count[step.until] - base[step.until] >= step.nth:
            return True
        try:
            event = await conn.next(deadline - time.monotonic())
        except TimeoutError:
            what = _show(payload) if payload is not None else f"(waiting for {step.until})"
            fuzz.miss(f"{family}: no answer in {step.timeout_s:.0f} s to {what}; the last "
                      f"events: {list(conn.recent)}")
            return False
        kind = event["type"]
        if kind == "<closed>":
            fuzz.miss(f"{family}: socket closed {conn.close_code} {conn.close_reason!r} "
                      f"after {_show(payload)}")
            return False
        if kind == "error":
            err = event.get("error") or {}
            got = (err.get("code"), err.get("event_id"))
            if step.error is None:
                fuzz.miss(f"{family}: an error {got} to a valid step {_show(payload)}: "
                          f"{str(err.get('message'))[:100]}")
                return False
            if got != (step.error, step.event_id):
                fuzz.miss(f"{family}: want {(step.error, step.event_id)}, got {got} "
                          f"({str(err.get('message'))[:100]}) to {_show(payload)}")
                return False
            return True
        if step.error is None and kind == step.until and step.nth is None and (
                step.match is None or step.match(event)):
            return True


async def _run_case(conn: Conn, case: Case, send, fuzz: Fuzz) -> bool:
    """Its steps in order; False if one was not answered as documented."""
    pending: list[tuple[Step, Any]] = []
    base = Counter(conn.count)
    for k, step in enumerate(case.steps):
        payload = step.payload(conn.seen) if callable(step.payload) else step.payload
        if callable(step.payload) and payload is None:
            fuzz.skipped += len(case.steps) - k
            return True
        if payload is not None:
            await send(payload)
        if step.error is not None:
            fuzz.malformed_sent += 1
            fuzz.families.setdefault(case.family, [0, 0])[0] += 1
        elif step.until is not None:
            fuzz.valid_steps += 1
        if step.error is not None or step.until is not None:
            pending.append((step, payload))
        if not step.wait:
            continue
        for s, p in pending:
            if not await _expect(conn, s, case.family, p, fuzz, base):
                return False
            if s.error is not None:
                fuzz.answered += 1
                fuzz.codes[s.error] += 1
                fuzz.families[case.family][1] += 1
            else:
                fuzz.valid_ok += 1
        pending = []
    return True


async def _keep_alive(conn: Conn, lock: asyncio.Lock) -> None:
    """Silence at real time (the idle timeout counts seconds of caller audio)."""
    started, sent_s = time.monotonic(), 0.0
    with contextlib.suppress(ConnectionClosed):
        while True:
            await asyncio.sleep(0.2)
            async with lock:
                elapsed = time.monotonic() - started
                sent_s = max(sent_s, elapsed - 0.5)  # after a stall: no catching up
                owed = elapsed - sent_s
                if owed >= 0.1:
                    await conn.ws.send(_append(owed))
                    sent_s += int(owed * RATE) / RATE


async def _fuzz_socket(ctx: Ctx, index: int, mine: list[Case], rate: float, fuzz: Fuzz,
                       tally: Tally) -> None:
    conn = await Conn.open(ctx, tally, subprotocol=index % 2 == 1)
    if conn is None:
        fuzz.sockets_closed_early.append(f"socket {index}: connect failed")
        return
    lock = asyncio.Lock()
    keeper: asyncio.Task | None = None
    last = [0.0]

    async def send(payload) -> None:
        wait = last[0] + 1.0 / rate - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        last[0] = time.monotonic()
        await conn.ws.send(payload)

    probe = Step(json.dumps({"type": "input_audio_buffer.clear"}),
                 until="input_audio_buffer.cleared")
    try:
        await conn.until("session.created")
        keeper = asyncio.create_task(_keep_alive(conn, lock))
        for n, case in enumerate(mine, 1):
            async with (lock if case.atomic else contextlib.nullcontext()):
                await _run_case(conn, case, send, fuzz)
            if conn.close_code is not None:
                break
            if n % PROBE_EVERY == 0 or n == len(mine):
                fuzz.probes += 1
                await send(probe.payload)
                if await _expect(conn, probe, "probe", probe.payload, fuzz, Counter()):
                    fuzz.probes_ok += 1
        with contextlib.suppress(TimeoutError):  # anything more (a duplicate error) is wrong
            while True:
                event = await conn.next(0.5)
                if event["type"] == "error":
                    fuzz.miss(f"socket {index}: an extra error at the end: {event['error']}")
                elif event["type"] == "<closed>":
                    break
    except (ConnectionClosed, RuntimeError, TimeoutError) as e:
        fuzz.sockets_closed_early.append(f"socket {index}: {type(e).__name__}: {e}"[:200])
    finally:
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        if conn.close_code is not None:  # the server closed it: a per-event mistake did
            fuzz.sockets_closed_early.append(
                f"socket {index}: closed by the server {conn.close_code} {conn.close_reason}")
        await conn.close(tally)


async def _live_caller(ctx: Ctx, index: int, turns: int) -> list[TurnResult]:
    use_source_ip(next_ip())
    rng = random.Random(40 + index)
    prompts = [ctx.prompts[rng.randrange(len(ctx.prompts))] for _ in range(turns)]
    url = realtime_url(ctx)
    out: list[TurnResult] = []
    await run_realtime_session(bench_config(ctx, url=url, protocol="realtime", pause_s=1.0),
                               url, index, prompts, 1, out.append)
    return out


def spoken(turn: TurnResult) -> bool:
    """Answered over Realtime: response.done completed, audible audio, transcript, text."""
    return answered(turn) and turn.server.get("response_status") == "completed"


async def _phase_fuzz(ctx: Ctx, scale: dict, tally: Tally) -> dict[str, Any]:
    rng = random.Random(31)
    mix = cases(rng, scale["rt_malformed"], scale["rt_busy_responses"],
                scale["rt_audio_responses"])
    n = scale["rt_sockets"]
    shares = [mix[k::n] for k in range(n)]
    fuzz = Fuzz()
    lag = LagProbe(ctx, 1.0)
    t0 = time.monotonic()
    try:
        callers = asyncio.gather(*(_live_caller(ctx, k, scale["rt_live_turns"])
                                   for k in range(2)))
        await asyncio.sleep(1.0)  # the callers' sessions first: the fuzz runs while they talk
        fuzzing = asyncio.gather(*(_fuzz_socket(ctx, k, share, scale["rt_send_rate"], fuzz,
                                                tally) for k, share in enumerate(shares)))
        fuzz_t0 = time.monotonic()
        await fuzzing
        fuzz_t1 = time.monotonic()
        turns = [t for call in await callers for t in call]
    finally:
        t1 = time.monotonic()
        await lag.stop()
    return {"fuzz": fuzz, "turns": turns, "lag_ms": lag.worst(t0, t1),
            "lag_samples": [(round(a - t0, 1), round(ms)) for a, _, ms in lag.samples],
            "fuzz_window": (round(fuzz_t0 - t0, 1), round(fuzz_t1 - t0, 1)),
            "fuzz_s": round(fuzz_t1 - fuzz_t0, 1), "phase_s": round(t1 - t0, 1),
            "cases": len(mix)}


# ------------------------------------------------------------------ 2. socket-level limits

async def _drain(conn: Conn, within_s: float) -> list[dict]:
    """Every event until the close (or `within_s`)."""
    out: list[dict] = []
    with contextlib.suppress(TimeoutError):
        deadline = time.monotonic() + within_s
        while True:
            event = await conn.next(deadline - time.monotonic())
            if event["type"] == "<closed>":
                break
            out.append(event)
    return out


def _errors(events: list[dict]) -> list[tuple]:
    return [(e["error"].get("code"), e["error"].get("event_id")) for e in events
            if e.get("type") == "error"]


async def _audio_flood(ctx: Ctx, tally: Tally) -> dict[str, Any]:
    conn = await Conn.open(ctx, tally)
    if conn is None:
        return {"ok": False, "detail": "connect failed"}
    events: list[dict] = []
    sent_s = 0.0
    try:
        await conn.until("session.created")
        second = base64.b64encode(bytes(2 * RATE)).decode()
        t0 = time.monotonic()
        for k in range(120):  # 1 s of audio every 20 ms: 50x real time
            if conn.close_code is not None:
                break
            with contextlib.suppress(ConnectionClosed):
                await conn.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                               "event_id": f"flood_{k}", "audio": second}))
                sent_s += 1.0
            await asyncio.sleep(0.02)
        events = await _drain(conn, 15.0)
        took = (conn.closed_t or time.monotonic()) - t0
    finally:
        await conn.close(tally)
    errors = _errors(events)
    dropped = sum(1 for code, eid in errors if code == "audio_too_fast" and eid is not None)
    last = errors[-1] if errors else None
    ok = (conn.close_code == 1008 and conn.close_reason == "audio_too_fast"
          and last == ("audio_too_fast", None))
    return {"ok": ok, "detail": f"close {conn.close_code} {conn.close_reason!r} after "
            f"{sent_s:.0f} s of audio in {took:.1f} s; {dropped} appends refused one by one "
            f"(audio_too_fast naming their event_id) before it; last error event {last}"}


async def _message_flood(ctx: Ctx, tally: Tally) -> dict[str, Any]:
    conn = await Conn.open(ctx, tally)
    if conn is None:
        return {"ok": False, "detail": "connect failed"}
    sent = 0
    try:
        await conn.until("session.created")
        message = json.dumps({"type": "input_audio_buffer.clear"})
        t0 = time.monotonic()
        for _ in range(5000):
            if conn.close_code is not None:
                break
            try:
                await conn.ws.send(message)
            except ConnectionClosed:
                break
            sent += 1
        events = await _drain(conn, 15.0)
        took = (conn.closed_t or time.monotonic()) - t0
    finally:
        await conn.close(tally)
    errors = _errors(events)
    ok = conn.close_code == 1008 and conn.close_reason == "message_rate"
    return {"ok": ok, "detail": f"close {conn.close_code} {conn.close_reason!r} after {sent} "
            f"messages sent in {took:.2f} s; error events before it: {errors[-3:]} (the "
            "WebSocket layer closes a flood without one, docs/protocol.md)"}


async def _idle(ctx: Ctx, tally: Tally, limit_s: float) -> dict[str, Any]:
    conn = await Conn.open(ctx, tally)
    if conn is None:
        return {"ok": False, "after_s": None, "detail": "connect failed"}
    t0 = time.monotonic()
    try:
        events = await _drain(conn, limit_s + 20.0)
    finally:
        await conn.close(tally)
    after = round((conn.closed_t or time.monotonic()) - t0, 2)
    errors = _errors(events)
    ok = (conn.close_code == 1008 and conn.close_reason == "idle_timeout"
          and errors[-1:] == [("idle_timeout", None)]
          and limit_s - 0.5 <= after <= limit_s + IDLE_SLACK_S)
    return {"ok": ok, "after_s": after, "close": f"{conn.close_code} {conn.close_reason}",
            "errors": errors}


async def _unknown_model(ctx: Ctx, tally: Tally, name: str) -> bool:
    conn = await Conn.open(ctx, tally, url=realtime_url(ctx, name))
    if conn is None:
        return False
    try:
        events = await _drain(conn, 15.0)
    finally:
        await conn.close(tally)
    return _errors(events) == [("model_not_found", None)] and conn.close_code == 1008


def _plain_get(ctx: Ctx) -> int:
    try:
        with urllib.request.urlopen(ctx.http + "/v1/realtime", timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return -1


async def _phase_limits(ctx: Ctx, scale: dict, tally: Tally) -> list[dict]:
    idle_s = float(ctx.settings.get("idle_timeout_s") or scale["idle_timeout_s"])
    audio, flood, *idle = await asyncio.gather(
        _audio_flood(ctx, tally), _message_flood(ctx, tally),
        *(_idle(ctx, tally, idle_s) for _ in range(scale["rt_idle_sockets"])))
    models = [await _unknown_model(ctx, tally, name)
              for name in ("gpt-realtime", "x" * 3000, "../../etc/passwd", "%00")]
    status = await asyncio.to_thread(_plain_get, ctx)
    tally.http_5xx += status >= 500
    idle_ok = sum(r["ok"] for r in idle)
    afters = [r["after_s"] for r in idle if r["after_s"] is not None]
    return [
        check("an audio flood (appends at 50x real time) is closed 1008 audio_too_fast after "
              "an error event", audio["ok"], audio["detail"]),
        check("a message flood is closed 1008 message_rate", flood["ok"], flood["detail"]),
        check(f"idle sockets (nothing sent) closed 1008 idle_timeout after an error event, "
              f"within {IDLE_SLACK_S:g} s of the {idle_s:g} s limit",
              idle_ok == len(idle) and len(idle) > 0,
              f"{idle_ok} of {len(idle)}; closed after {min(afters, default=None)}-"
              f"{max(afters, default=None)} s; "
              + "; ".join(f"{r['close']} {r['errors']}" for r in idle if not r["ok"])[:200]),
        check("an unknown ?model= is refused with one error event (model_not_found) and 1008; "
              "a plain GET of /v1/realtime is answered below 500",
              all(models) and 0 < status < 500,
              f"{sum(models)} of {len(models)} refused as documented; GET -> {status}"),
    ]


# ------------------------------------------------------------------ 3. memory

async def _mem_session(ctx: Ctx, tally: Tally, i: int) -> str | None:
    """One short Realtime session; None when everything was answered, else what went wrong.
    A session the server refuses as `overloaded` (its lines still held by sessions whose
    client has just closed: the server frees a line when the call's pipeline has shut down,
    ~0.1 s later) is tried again after BUSY_RETRY_S, up to 10 times (counted in tally.busy)."""
    for _ in range(10):
        conn = await Conn.open(ctx, tally)
        if conn is None:
            return "connect failed"
        first = await conn.next(30.0)
        if first.get("type") == "session.created":
            break
        await conn.close(tally)
        if (first.get("error") or {}).get("code") != "overloaded":
            return f"refused: {json.dumps(first)[:160]}"
        tally.busy += 1
        await asyncio.sleep(BUSY_RETRY_S)
    else:
        return "refused overloaded 10 times"
    try:
        await conn.ws.send(json.dumps({"type": "session.update", "session": {
            "type": "realtime", "instructions": f"You are test session {i}.",
            "audio": {"input": {"turn_detection": {"type": "server_vad",
                                                   "silence_duration_ms": 500}}}}}))
        await conn.until("session.updated")
        for _ in range(5):
            await conn.ws.send(_append(0.1))
        await conn.ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": f"Hello from session {i}."}]}}))
        await conn.until("conversation.item.done")
        return None
    except (RuntimeError, TimeoutError, ConnectionClosed) as e:
        return f"{type(e).__name__}: {e}"[:200]
    finally:
        await conn.close(tally)


async def _mem_batch(ctx: Ctx, tally: Tally, start: int, count: int,
                     conc: int) -> list[str | None]:
    sem = asyncio.Semaphore(conc)

    async def one(i: int) -> str | None:
        async with sem:
            return await _mem_session(ctx, tally, i)

    return list(await asyncio.gather(*(one(start + i) for i in range(count))))


async def _phase_memory(ctx: Ctx, scale: dict, tally: Tally) -> tuple[list[dict], dict]:
    conc, n = scale["rt_mem_concurrency"], scale["rt_mem_sessions"]
    before = await settled(ctx)
    results = await _mem_batch(ctx, tally, 0, scale["rt_mem_warmup"], conc)
    base = await settled(ctx)
    curve = [(0, round(base[RSS] / 2**20, 1))]
    done, step = 0, conc * 5
    while done < n:
        k = min(step, n - done)
        results += await _mem_batch(ctx, tally, scale["rt_mem_warmup"] + done, k, conc)
        done += k
        curve.append((done, round((await metrics(ctx))[RSS] / 2**20, 1)))
    after = await settled(ctx, baseline=base)
    await asyncio.sleep(3)
    after = await settled(ctx, baseline=base)
    per = (after[RSS] - base[RSS]) / 2**20 / n
    steady, steady_n = steady_growth(curve)
    checks = [
        check(f"RSS growth <= {GOAL_MB} MB per Realtime session over {n} sessions after a "
              f"{scale['rt_mem_warmup']}-session warm-up at the same concurrency ({conc})",
              per <= GOAL_MB,
              f"{per:.3f} MB/session ({base[RSS] / 2**20:.0f} -> {after[RSS] / 2**20:.0f} MB); "
              f"over the last {steady_n}: "
              f"{steady if steady is None else round(steady, 3)} MB/session"),
        check("every memory-run Realtime session answered (session.updated, its item added)",
              not any(results), f"{sum(r is None for r in results)} of {len(results)} ("
              f"{tally.busy} opens refused overloaded while lines were still being freed, "
              "tried again)" + "; ".join(sorted({r for r in results if r})[:2])),
    ]
    figures = {"mem_before_warmup_mb": round(before[RSS] / 2**20, 1),
               "mem_baseline_mb": round(base[RSS] / 2**20, 1),
               "mem_after_mb": round(after[RSS] / 2**20, 1),
               "mem_per_session_mb": round(per, 3),
               "mem_steady_per_session_mb": None if steady is None else round(steady, 4),
               "mem_busy_retries": tally.busy,
               "curve": curve}
    return checks, figures


# ------------------------------------------------------------------ the part

def _log_text(ctx: Ctx) -> str:
    path = getattr(ctx.server, "log_path", None)
    return path.read_text(errors="replace") if path else ""


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    log_start = len(_log_text(ctx))
    tally = Tally()
    a = await _phase_fuzz(ctx, scale, tally)
    fuzz: Fuzz = a["fuzz"]
    turns: list[TurnResult] = a["turns"]
    limit_checks = await _phase_limits(ctx, scale, tally)
    mem_checks, mem = await _phase_memory(ctx, scale, tally)
    after = await settled(ctx, baseline=baseline)
    log = _log_text(ctx)[log_start:]
    tracebacks = log.count("Traceback (most recent call last)")
    internal = log.count(": internal error")
    vad_late = log.count("caller audio reaches the VAD")  # voice.lag_watch, any session

    good = sum(map(spoken, turns))
    summary = turn_summary(turns)
    v2v = [t.stages(True).get("voice_to_voice_ms") for t in turns]
    failed_1011 = sum("1011" in (t.message or "") for t in turns)
    closes_1011 = tally.closes.get("1011", 0) + failed_1011
    lag = a["lag_ms"]
    checks = [
        check(f"at least {scale['rt_malformed']} malformed Realtime events sent while two "
              "callers talk", fuzz.malformed_sent >= scale["rt_malformed"],
              f"{fuzz.malformed_sent} over {scale['rt_sockets']} sockets in {a['fuzz_s']} s "
              f"({a['cases']} cases: {len(fuzz.families)} families)"),
        check("every malformed event answered by exactly one error event with its documented "
              "code, naming the client's event_id; every valid step of a sequence by its event",
              fuzz.mismatches == 0 and fuzz.answered == fuzz.malformed_sent
              and fuzz.valid_ok == fuzz.valid_steps,
              f"{fuzz.answered} of {fuzz.malformed_sent} errors as documented; "
              f"{fuzz.valid_ok} of {fuzz.valid_steps} valid steps; {fuzz.mismatches} "
              f"mismatches; {fuzz.skipped} steps skipped"
              + (f": {fuzz.examples[0]}" if fuzz.examples else "")),
        check("per-event mistakes never close the socket (each fuzz socket open to the end and "
              "still answering)", not fuzz.sockets_closed_early
              and fuzz.probes_ok == fuzz.probes,
              f"{fuzz.probes_ok} of {fuzz.probes} probes answered; closed early: "
              f"{fuzz.sockets_closed_early[:3]}"),
        check("the two live Realtime callers: every turn answered (response.done completed, "
              "audible audio, transcript) with a voice-to-voice figure",
              good == len(turns) and len(turns) == 2 * scale["rt_live_turns"]
              and all(x is not None for x in v2v),
              f"{good} of {len(turns)}; voice-to-voice p50 {summary['v2v_p50_ms']} ms, p99 "
              f"{summary['v2v_p99_ms']} ms; failed: {summary['failed'][:2]}"),
        check(f"server event-loop lag during the fuzz <= {LAG_GOAL_MS:.0f} ms",
              lag is not None and lag <= LAG_GOAL_MS,
              f"max {lag} ms over {a['phase_s']} s (siege.LagProbe, 1 s windows)"),
        *limit_checks,
        *mem_checks,
        check("0 closes 1011 and 0 HTTP 5xx on any Realtime socket", closes_1011 == 0
              and tally.http_5xx == 0,
              f"1011: {closes_1011}, 5xx: {tally.http_5xx}; closes by code: "
              f"{dict(sorted(tally.closes.items()))}"),
        check("no traceback or internal error in the server log during the part",
              tracebacks == 0 and internal == 0,
              f"{tracebacks} tracebacks, {internal} internal errors"),
        *leak_checks(after, baseline, "after realtime"),
    ]
    return {"malformed_sent": fuzz.malformed_sent, "errors_answered": fuzz.answered,
            "mismatches": fuzz.mismatches, "valid_steps": fuzz.valid_steps,
            "valid_ok": fuzz.valid_ok, "skipped_steps": fuzz.skipped,
            "error_codes": dict(fuzz.codes.most_common()),
            "closes_by_code": dict(sorted(tally.closes.items())), "http_5xx": tally.http_5xx,
            "connect_failures": tally.connect_failures,
            "lag_max_ms": lag, "fuzz_s": a["fuzz_s"], "live": summary,
            "vad_late_log_lines": vad_late,
            **mem, "families": {k: {"sent": v[0], "answered": v[1]}
                                for k, v in sorted(fuzz.families.items())},
            "mismatch_examples": fuzz.examples, "checks": checks}
