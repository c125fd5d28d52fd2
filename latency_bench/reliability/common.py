"""What every reliability part shares: the server under test, /metrics and /healthz reads, a
/ws ping round-trip probe, legitimate calls through the existing load clients, and checks.

Contract:
- `Ctx(server, prompts, twilio_token)`: `http`, `ws`, `webhook` URLs of the LocalServer.
- `await metrics(ctx) -> dict[str, float]` (samples by name, labels folded into the name as
  `name{k="v"}`; with several server workers, summed over them), `await health(ctx) -> dict`
  (the worker that answered).
- `PingProbe(ctx, interval_s)`: `async with` opens one /ws call (from its own loopback IP),
  sends `ping` every interval and a 20 ms silence frame every 2 s (so idle reaping leaves it
  alone) and records round-trip times in `rtts_ms`.
- `await legit_calls(ctx, n, turns, protocol, pause_s)` -> list of TurnResult: n calls of real
  espeak-ng speech through latency_bench.browser_client / twilio_client, each from its own
  loopback IP; `answered(turn)` says a turn completed correctly (status ok, a final transcript,
  bot text and audible bot audio).
- `check(name, ok, detail)` -> the dict every part's "checks" list holds.
"""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import Prompt
from diffvoice.latency_bench.source_addr import loopback_ip, use_source_ip
from diffvoice.latency_bench.turns import TurnResult
from diffvoice.voice.transport import protocol

SILENCE_20MS = bytes(640)
_ip_counter = iter(range(10_000, 62_000))


def next_ip() -> str:
    """A loopback source address no other caller of this run used."""
    return loopback_ip(next(_ip_counter))


@dataclass
class Ctx:
    server: Any  # latency_bench.server_proc.LocalServer
    prompts: Sequence[Prompt]
    twilio_token: str
    settings: dict[str, Any] = field(default_factory=dict)  # the server's limit flags

    @property
    def http(self) -> str:
        return self.server.base_url

    @property
    def ws(self) -> str:
        return self.server.ws_url("/ws")

    @property
    def webhook(self) -> str:
        return self.server.base_url + "/telephony/twilio/voice"

    @property
    def stream(self) -> str:
        return self.server.ws_url("/telephony/twilio/stream")


def check(name: str, ok: bool, detail: str = "") -> dict[str, Any]:
    return {"name": name, "ok": bool(ok), "detail": detail}


def _get(url: str, timeout: float = 10.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return response.read()


async def metrics(ctx: Ctx) -> dict[str, float]:
    """One server's samples. With `serve --workers N` (ctx.settings["workers"]) that is
    /metrics/cluster with the workers' `replica` label folded away: summed (sessions, slots,
    tasks, fds, RSS: the whole server's), the event-loop lag and `*_max_ms` gauges (the
    engine's longest preparation) as their worst worker's."""
    workers = int(ctx.settings.get("workers") or 1)
    path = "/metrics/cluster" if workers > 1 else "/metrics"
    text = (await asyncio.to_thread(_get, ctx.http + path)).decode()
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items())
                              if not (workers > 1 and k == "replica"))
            key = f"{sample.name}{{{labels}}}" if labels else sample.name
            if key not in out:
                out[key] = sample.value
            elif "lag" in sample.name or sample.name.endswith("_max_ms"):  # worst worker's
                out[key] = max(out[key], sample.value)
            else:
                out[key] += sample.value
    return out


async def health(ctx: Ctx) -> dict[str, Any]:
    return json.loads(await asyncio.to_thread(_get, ctx.http + "/healthz"))


LEAK_GAUGES = ("diffvoice_engine_running_requests", "diffvoice_engine_queue_depth",
               "diffvoice_engine_callers", "diffvoice_engine_generators",
               "diffvoice_active_sessions", "diffvoice_active_session_ids",
               "diffvoice_client_slots_held")


async def settled(ctx: Ctx, within_s: float = 30.0,
                  baseline: dict[str, float] | None = None) -> dict[str, float]:
    """/metrics once every leak gauge is back to 0 and (given a baseline) loop tasks and fds
    are back to it (+2), or after `within_s`: what is left."""
    deadline = time.monotonic() + within_s
    while True:
        m = await metrics(ctx)
        done = all(m.get(g, 0) == 0 for g in LEAK_GAUGES)
        if baseline is not None:
            done = done and all(m.get(k, 0) <= baseline.get(k, 0) + 2
                                for k in ("diffvoice_event_loop_tasks", "process_open_fds"))
        if done or time.monotonic() > deadline:
            return m
        await asyncio.sleep(0.5)


async def task_names(ctx: Ctx) -> dict[str, int]:
    return (await health(ctx)).get("event_loop_tasks", {})


def leak_checks(m: dict[str, float], baseline: dict[str, float], prefix: str) -> list[dict]:
    out = [check(f"{prefix}: {g} back to 0", m.get(g, 0) == 0, f"{m.get(g)}")
           for g in LEAK_GAUGES]
    slots = m.get("diffvoice_engine_free_slots"), m.get("diffvoice_engine_max_running")
    out.append(check(f"{prefix}: every engine slot free", slots[0] == slots[1],
                     f"{slots[0]} of {slots[1]}"))
    for name, slack in (("diffvoice_event_loop_tasks", 2), ("process_open_fds", 2)):
        before, after = baseline.get(name, 0), m.get(name, 0)
        out.append(check(f"{prefix}: {name} back to baseline (+{slack})",
                         after <= before + slack, f"{before:.0f} -> {after:.0f}"))
    return out


class PingProbe:
    def __init__(self, ctx: Ctx, interval_s: float = 0.1) -> None:
        self.ctx = ctx
        self.interval_s = interval_s
        self.rtts_ms: list[float] = []
        self.error: str | None = None
        self._task: asyncio.Task | None = None

    async def __aenter__(self) -> PingProbe:
        self._ws = await connect(self.ctx.ws, ping_interval=None, open_timeout=30,
                                 local_addr=(next_ip(), 0))
        await self._ws.send(protocol.SessionStart(config={}).encode())
        await asyncio.wait_for(self._ws.recv(), 30)  # session.started
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        pongs: asyncio.Queue = asyncio.Queue()

        async def read():
            async for message in self._ws:
                if isinstance(message, str) and '"pong"' in message:
                    pongs.put_nowait(time.perf_counter())

        reader = asyncio.create_task(read())
        started, audio_s = time.monotonic(), 0.0
        try:
            for _ in range(1_000_000):  # bounded; cancelled when the part ends
                # silence at real time, as a browser's microphone sends it: the server counts
                # a session's idleness in seconds of audio, not in frames
                owed = min(time.monotonic() - started - audio_s, 1.0)
                if owed >= 0.02:
                    samples = int(owed * protocol.INPUT_SAMPLE_RATE)
                    await self._ws.send(bytes(2 * samples))
                    audio_s += samples / protocol.INPUT_SAMPLE_RATE
                while not pongs.empty():  # a pong that came after its 5 s timeout
                    pongs.get_nowait()
                sent = time.perf_counter()
                await self._ws.send(protocol.Ping().encode())
                try:
                    got = await asyncio.wait_for(pongs.get(), 5.0)
                    self.rtts_ms.append((got - sent) * 1000.0)
                except TimeoutError:
                    self.rtts_ms.append(5000.0)
                await asyncio.sleep(self.interval_s)
        except ConnectionClosed as e:
            self.error = f"probe closed: {e}"
        finally:
            reader.cancel()

    async def __aexit__(self, *exc) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        await self._ws.close()

    def summary(self) -> dict[str, Any]:
        r = np.array(self.rtts_ms) if self.rtts_ms else np.array([np.nan])
        return {"pings": len(self.rtts_ms), "p50_ms": round(float(np.nanpercentile(r, 50)), 1),
                "p99_ms": round(float(np.nanpercentile(r, 99)), 1),
                "max_ms": round(float(np.nanmax(r)), 1), "error": self.error}


def bench_config(ctx: Ctx, **changes) -> BenchConfig:
    base = dict(url=ctx.ws, turn_timeout_s=60.0, pause_s=1.0, progress=False,
                twilio_auth_token=ctx.twilio_token, connect_timeout_s=30.0, bot_quiet_s=1.0)
    base.update(changes)
    return BenchConfig(**base)


async def one_call(ctx: Ctx, prompts: Sequence[Prompt], protocol_name: str, session: int,
                   pause_s: float = 1.0, on_turn=None) -> list[TurnResult]:
    """One call of len(prompts) turns from a fresh loopback IP."""
    from diffvoice.latency_bench.browser_client import run_browser_session
    from diffvoice.latency_bench.twilio_client import run_twilio_session

    use_source_ip(next_ip())
    turns: list[TurnResult] = []

    def record(turn: TurnResult) -> None:
        turns.append(turn)
        if on_turn is not None:
            on_turn(turn)

    if protocol_name == "browser":
        config = bench_config(ctx, url=ctx.ws, pause_s=pause_s)
        await run_browser_session(config, ctx.ws, session, prompts, 1, record)
    else:
        config = bench_config(ctx, url=ctx.webhook, protocol="twilio", pause_s=pause_s)
        await run_twilio_session(config, ctx.webhook, session, prompts, 1, record)
    return turns


async def legit_calls(ctx: Ctx, n: int, turns: int, pause_s: float = 1.0,
                      protocols: Sequence[str] = ("browser", "twilio")) -> list[TurnResult]:
    rng = np.random.default_rng(7)
    jobs = []
    for i in range(n):
        picks = [ctx.prompts[int(k)] for k in rng.integers(0, len(ctx.prompts), turns)]
        jobs.append(one_call(ctx, picks, protocols[i % len(protocols)], i, pause_s))
    results = await asyncio.gather(*jobs)
    return [t for call in results for t in call]


def answered(turn: TurnResult) -> bool:
    """Completed correctly: ok, the answer was heard, and (browser calls, which carry text)
    a final transcript and bot text came. Media Streams carry no text (transcript is None)."""
    if turn.status != "ok" or turn.first_audible_t is None:
        return False
    return turn.transcript is None or (bool(turn.transcript) and bool(turn.bot_text.strip()))


def turn_summary(turns: Sequence[TurnResult]) -> dict[str, Any]:
    v2v = [t.stages(True).get("voice_to_voice_ms") for t in turns if t.status == "ok"]
    v2v = [x for x in v2v if x is not None]
    server = [float(t.server["server_ms"]) for t in turns if t.status == "ok"
              and isinstance(t.server.get("server_ms"), (int, float))]  # browser turns only
    return {"turns": len(turns), "ok": sum(t.status == "ok" for t in turns),
            "failed": [f"{t.status}: {t.message}" for t in turns if t.status != "ok"][:10],
            "v2v_p50_ms": round(float(np.percentile(v2v, 50)), 0) if v2v else None,
            "v2v_p99_ms": round(float(np.percentile(v2v, 99)), 0) if v2v else None,
            "server_ms_p50": round(float(np.percentile(server, 50)), 0) if server else None,
            "server_ms_p99": round(float(np.percentile(server, 99)), 0) if server else None}
