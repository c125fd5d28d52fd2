"""Memory: server RSS per session over many sessions, after a warm-up.

Contract: `await run(ctx, scale)` runs `mem_warmup` one-turn calls, reads the server's
process_resident_memory_bytes from /metrics (baseline), runs `mem_sessions` more one-turn calls
(browser and Twilio alternating, `mem_concurrency` at a time, each speaking one espeak-ng prompt
and hearing the answer), waits for the leak gauges to settle, and reads RSS again. The warm-up
runs at the same concurrency, long enough (full run: 80 sessions, 10 rounds of 8) for the
per-call pools (ASR decoders, TTS and audio buffers, malloc arenas) to reach the size that
concurrency needs. Figures: MB per session over all measured sessions (goal <= 0.3, checked),
over the second half of them (`steady_growth`, reported), and the RSS curve every
`mem_concurrency * 5` sessions.
"""

from __future__ import annotations

import asyncio
from typing import Any

from diffvoice.latency_bench.reliability.common import (
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


def steady_growth(curve: list) -> tuple[float | None, int]:
    """MB per session over the second half of the run: (RSS at the end - RSS at the first
    curve point at or past half the sessions) / sessions between them. Pools that grow to the
    concurrency level (one ASR decoder, TTS and VAD buffers per concurrent call) have filled by
    then; what still grows per session is a leak."""
    if len(curve) < 3:
        return None, 0
    half = curve[-1][0] / 2
    mid = next(p for p in curve if p[0] >= half)
    n = curve[-1][0] - mid[0]
    return ((curve[-1][1] - mid[1]) / n if n else None), n


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
    steady, steady_n = steady_growth(curve)
    checks = [
        check(f"RSS growth <= {GOAL_MB} MB per session over {scale['mem_sessions']} sessions "
              f"after a {scale['mem_warmup']}-session warm-up at the same concurrency ({conc})",
              per_session <= GOAL_MB,
              f"{per_session:.3f} MB/session ({base[RSS] / 2**20:.0f} -> "
              f"{after[RSS] / 2**20:.0f} MB); over the last {steady_n}: "
              f"{steady if steady is None else round(steady, 3)} MB/session"),
        check("every memory-run call answered", all(map(answered, turns)),
              f"{sum(map(answered, turns))} of {len(turns)}"),
        *leak_checks(after, base, "after memory"),
    ]
    return {"baseline_mb": round(base[RSS] / 2**20, 1), "after_mb": round(after[RSS] / 2**20, 1),
            "per_session_mb": round(per_session, 3),
            "steady_per_session_mb": None if steady is None else round(steady, 4),
            "curve": curve, "checks": checks}
