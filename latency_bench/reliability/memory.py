"""Memory: server RSS per session over many sessions, after a warm-up.

Contract: `await run(ctx, scale)` runs `mem_warmup` one-turn calls, reads the server's
process_resident_memory_bytes from /metrics (baseline), runs `mem_sessions` more one-turn calls
(browser and Twilio alternating, `mem_concurrency` at a time, each speaking one espeak-ng prompt
and hearing the answer), waits for the leak gauges to settle, and reads RSS again. Figure:
(RSS after - baseline) / mem_sessions in MB (goal <= 0.3), plus the RSS curve every
`mem_concurrency * 5` sessions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from latency_bench.reliability.common import (
    Ctx,
    answered,
    check,
    leak_checks,
    metrics,
    one_call,
    settled,
)

GOAL_MB = 0.3
RSS = "process_resident_memory_bytes"


async def _batch(ctx: Ctx, start: int, count: int, concurrency: int) -> list:
    sem = asyncio.Semaphore(concurrency)

    async def call(i: int):
        async with sem:
            prompt = ctx.prompts[i % len(ctx.prompts)]
            return await one_call(ctx, [prompt], ("browser", "twilio")[i % 2], i, pause_s=0.2)

    results = await asyncio.gather(*(call(start + i) for i in range(count)))
    return [t for r in results for t in r]


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    conc = scale["mem_concurrency"]
    await _batch(ctx, 0, scale["mem_warmup"], conc)
    base = await settled(ctx)
    curve = [(0, round(base[RSS] / 2**20, 1))]
    turns, done, step = [], 0, conc * 5
    while done < scale["mem_sessions"]:
        n = min(step, scale["mem_sessions"] - done)
        turns += await _batch(ctx, scale["mem_warmup"] + done, n, conc)
        done += n
        curve.append((done, round((await metrics(ctx))[RSS] / 2**20, 1)))
    after = await settled(ctx, baseline=base)
    await asyncio.sleep(3)
    after = await settled(ctx, baseline=base)
    per_session = (after[RSS] - base[RSS]) / 2**20 / scale["mem_sessions"]
    checks = [
        check(f"RSS growth <= {GOAL_MB} MB per session over {scale['mem_sessions']} sessions",
              per_session <= GOAL_MB, f"{per_session:.3f} MB/session ({base[RSS] / 2**20:.0f} "
              f"-> {after[RSS] / 2**20:.0f} MB)"),
        check("every memory-run call answered", all(map(answered, turns)),
              f"{sum(map(answered, turns))} of {len(turns)}"),
        *leak_checks(after, base, "after memory"),
    ]
    return {"baseline_mb": round(base[RSS] / 2**20, 1), "after_mb": round(after[RSS] / 2**20, 1),
            "per_session_mb": round(per_session, 3), "curve": curve, "checks": checks}
