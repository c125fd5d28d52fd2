"""Soak: many simulated callers (browser and Twilio) for minutes through the real server, with a
realistic duty cycle: talk, listen to the answer, pause, talk again; hang up after a few turns
and call again.

Contract: `await run(ctx, scale)`: `soak_callers` callers (even: browser, odd: Twilio), start
times spread over the first 10 s, each placing calls of `soak_call_turns` turns with
`soak_pause_s` of silence after each answer, until `soak_s` has passed (bounded: at most
soak_s / 5 calls per caller). /metrics is sampled every 10 s. Figures: turns, errors, duty cycle
(caller speech seconds / caller-seconds), voice_to_voice p50/p99 of the first and the last
minute, RSS after the first minute (warm-up) vs at the end, and the leak gauges once every
caller has hung up. Checks: 0 failed turns, RSS growth < 5% after warm-up, every leak gauge
back to 0 and tasks / fds back to their baseline.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import numpy as np

from diffvoice.latency_bench.reliability.common import (
    Ctx,
    check,
    leak_checks,
    metrics,
    one_call,
    settled,
)
from diffvoice.latency_bench.turns import TurnResult

RSS = "process_resident_memory_bytes"
SAMPLED = (RSS, "process_open_fds", "diffvoice_event_loop_tasks", "diffvoice_active_sessions",
           "diffvoice_engine_running_requests", "diffvoice_engine_queue_depth",
           "diffvoice_engine_callers")
RSS_GOAL = 0.05


def _p(values, q) -> float | None:
    return round(float(np.percentile(values, q)), 0) if values else None


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    duration = scale["soak_s"]
    t0 = time.time()
    deadline = t0 + duration
    turns: list[TurnResult] = []
    speech_s = 0.0
    samples: list[dict[str, float]] = []
    rng = random.Random(3)

    async def caller(i: int) -> None:
        nonlocal speech_s
        await asyncio.sleep(rng.uniform(0, min(10.0, duration / 4)))
        proto = ("browser", "twilio")[i % 2]
        for call in range(max(1, int(duration / 5))):
            if time.time() >= deadline:
                return
            prompts = rng.sample(list(ctx.prompts), scale["soak_call_turns"])
            speech_s += sum(p.speech_end_s - p.speech_start_s for p in prompts)
            turns.extend(await one_call(ctx, prompts, proto, i * 1000 + call,
                                        pause_s=scale["soak_pause_s"]))

    async def sampler() -> None:
        for _ in range(int(duration / 10) + 100):
            m = await metrics(ctx)
            samples.append({"t": round(time.time() - t0, 1), **{k: m.get(k) for k in SAMPLED}})
            if time.time() > deadline + 60:
                return
            await asyncio.sleep(10)

    sampling = asyncio.create_task(sampler())
    await asyncio.gather(*(caller(i) for i in range(scale["soak_callers"])))
    wall = time.time() - t0
    sampling.cancel()
    await asyncio.gather(sampling, return_exceptions=True)
    after = await settled(ctx, within_s=60, baseline=baseline)

    def v2v(lo: float, hi: float) -> list[float]:
        out = []
        for t in turns:
            end = t.speech_end_t
            value = t.stages(True).get("voice_to_voice_ms") if t.status == "ok" else None
            if end is not None and value is not None and lo <= end - t0 < hi:
                out.append(value)
        return out

    first, last = v2v(0, 60), v2v(duration - 60, duration + 120)
    warm = next((s for s in samples if s["t"] >= min(60, duration / 3)), samples[0])
    end_sample = samples[-1]
    growth = (end_sample[RSS] - warm[RSS]) / warm[RSS] if warm.get(RSS) else None
    errors = [f"{t.status}: {t.message}" for t in turns if t.status != "ok"]
    duty = speech_s / (scale["soak_callers"] * wall)
    checks = [
        check("0 failed turns", not errors and bool(turns),
              f"{len(errors)} of {len(turns)}" + (f"; first: {errors[0][:160]}" if errors
                                                   else "")),
        check(f"RSS growth < {RSS_GOAL:.0%} after warm-up", growth is not None and
              growth < RSS_GOAL, f"{warm[RSS] / 2**20:.0f} MB at {warm['t']} s -> "
              f"{end_sample[RSS] / 2**20:.0f} MB at {end_sample['t']} s "
              f"({(growth or 0) * 100:+.1f}%)"),
        *leak_checks(after, baseline, "after soak"),
    ]
    return {"callers": scale["soak_callers"], "duration_s": duration, "wall_s": round(wall, 1),
            "turns": len(turns), "errors": len(errors), "error_examples": errors[:5],
            "duty_cycle_speech": round(duty, 3), "pause_s": scale["soak_pause_s"],
            "turns_per_call": scale["soak_call_turns"],
            "first_minute": {"turns": len(first), "p50_ms": _p(first, 50), "p99_ms": _p(first, 99)},
            "last_minute": {"turns": len(last), "p50_ms": _p(last, 50), "p99_ms": _p(last, 99)},
            "rss_growth": round(growth, 4) if growth is not None else None,
            "samples": samples, "checks": checks}
