"""Soak: many simulated callers (browser and Twilio) for minutes through the real server, with a
receptionist line's call pattern: a caller asks something short, listens to the answer, is
quiet for a while (checks a calendar, thinks, talks to someone in the room) with the
microphone open, asks again; hangs up after a few turns and another call takes the line.

Contract: `await run(ctx, scale)`: `soak_callers` concurrent callers (even: browser, odd:
Twilio), split over `soak_procs` load-generator processes (each its own event loop and
loopback-address block, so the load generator's own pacing is not what limits the run; each
call records its worst pacing lag). The first calls start at uniform random times over the
first `soak_ramp_s` (calls arrive over time, not all in one second). A call has
`soak_call_turns` turns; after each answer the caller stays silent (streaming silence, as an
open microphone and Twilio do) for a pause drawn per call uniformly from [0.5, 1.5] x
`soak_pause_s`; then the next call starts at once, until `soak_s` has passed (bounded: at most
soak_s / 5 calls per caller). /metrics is sampled every 10 s. Figures: turns, errors, the
speech duty cycle (caller speech seconds / caller-seconds), voice_to_voice p50/p99 of the
first and the last minute, RSS after the warm-up (`soak_warmup_s`) vs at the end, and the leak
gauges once every caller has hung up. Checks: 0 failed turns, RSS growth < 5% after warm-up,
every leak gauge back to 0 and tasks / fds back to their baseline.

RSS growth compares like with like: the highest RSS sample of the warm-up's last minute vs the
highest of the soak's last minute (every caller on the line in both; the ramp ends before).
Single samples are not comparable: the server trims the allocator when a call ends
(voice.malloc_tune), so RSS dips for a few seconds whenever calls end together (the first calls
end right around the warm-up), and the sample after the last caller hung up measures fewer
sessions. The single-sample figure (first sample after the warm-up vs the last sample) is
reported beside it as `rss_growth_samples`.
"""

from __future__ import annotations

import asyncio
import pickle
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from diffvoice.latency_bench.reliability.common import (
    Ctx,
    check,
    leak_checks,
    metrics,
    settled,
)
from diffvoice.latency_bench.turns import TurnResult

RSS = "process_resident_memory_bytes"
LAG_MEAN = 'diffvoice_event_loop_lag_seconds{stat="mean"}'  # over the 10 s between samples
LAG_MAX = 'diffvoice_event_loop_lag_seconds{stat="max"}'
SAMPLED = (RSS, "process_open_fds", "diffvoice_event_loop_tasks", "diffvoice_active_sessions",
           "diffvoice_engine_running_requests", "diffvoice_engine_queue_depth",
           "diffvoice_engine_callers", 'diffvoice_asr_decoders{state="in_use"}',
           'diffvoice_asr_decoders{state="built"}', 'diffvoice_asr_decoders{state="waited"}',
           LAG_MEAN, LAG_MAX)
RSS_GOAL = 0.05
END_BOUND_S = 240.0  # after soak_s, calls in progress get this long to finish their turns
FAILED_KEPT = 40  # failed turns reported with their evidence (prompt, transcript, timeline)
IP_BLOCK = 15_000  # loopback addresses per load-generator process (blocks 1, 2, ...)


def _p(values, q) -> float | None:
    return round(float(np.percentile(values, q)), 0) if values else None


def _peak(samples: list[dict], lo: float, hi: float) -> dict | None:
    """The sample with the highest RSS among those taken at lo <= t < hi (None if none)."""
    inside = [s for s in samples if lo <= s["t"] < hi and s.get(RSS)]
    return max(inside, key=lambda s: s[RSS]) if inside else None


def _lag_summary(samples: list[dict], warmup: float, duration: float) -> dict:
    """Event-loop timer lateness (ms) while every caller is on the line (warm-up to the end):
    the mean of the 10 s means and the worst single wake-up."""
    inside = [s for s in samples if warmup <= s["t"] < duration and s.get(LAG_MEAN) is not None]
    if not inside:
        return {}
    return {"mean": round(1000 * float(np.mean([s[LAG_MEAN] for s in inside])), 1),
            "max": round(1000 * max(s[LAG_MAX] for s in inside), 1)}


def rss_growth(samples: list[dict], warmup: float, duration: float) -> tuple:
    """(growth, warm sample, end sample): the highest RSS of [warmup - 60, warmup) vs of
    [duration - 60, duration); a run too short to have a sample in a window uses the first
    sample at or after the warm-up / the last sample instead (never one sample twice)."""
    warm = (_peak(samples, max(0.0, warmup - 60), warmup)
            or next((s for s in samples if s["t"] >= warmup), samples[0]))
    end = _peak(samples, max(warmup, warm["t"] + 1e-6, duration - 60), duration) or samples[-1]
    growth = (end[RSS] - warm[RSS]) / warm[RSS] if warm.get(RSS) and end.get(RSS) else None
    return growth, warm, end


def _callers(server: dict, prompts, token: str, scale: dict, ids: list[int], t0: float,
             block: int) -> tuple[list[TurnResult], float, float, int]:
    """One load-generator process: the callers `ids` (run with asyncio.run in this process).
    Returns their turns, caller speech seconds, the worst pacing lag (s) and the turns still
    open END_BOUND_S after the deadline (cut: counted as failed)."""
    from diffvoice.latency_bench.reliability import common

    common._ip_counter = iter(range(10_000 + block * IP_BLOCK, 10_000 + (block + 1) * IP_BLOCK))
    stub = SimpleNamespace(base_url=server["http"], ws_url=lambda path: server["ws"] + path)
    ctx = Ctx(stub, prompts, token)
    duration = scale["soak_s"]
    deadline = t0 + duration
    turns: list[TurnResult] = []
    speech = [0.0]

    async def caller(i: int) -> None:
        rng = random.Random(1000 + i)
        await asyncio.sleep(max(0.0, t0 + rng.uniform(0, scale["soak_ramp_s"]) - time.time()))
        proto = ("browser", "twilio")[i % 2]
        for call in range(max(1, int(duration / 5))):
            if time.time() >= deadline:
                return
            picks = rng.sample(list(prompts), scale["soak_call_turns"])
            speech[0] += sum(p.speech_end_s - p.speech_start_s for p in picks)
            pause = scale["soak_pause_s"] * rng.uniform(0.5, 1.5)
            mine: list[TurnResult] = []

            def record(turn: TurnResult, mine=mine) -> None:
                mine.append(turn)
                turns.append(turn)

            try:
                await common.one_call(ctx, picks, proto, i * 1000 + call, pause_s=pause,
                                      on_turn=record)
            except asyncio.CancelledError:  # the end bound: this call's open turns never ended
                cut[0] += len(picks) - len(mine)
                raise

    async def progress() -> None:  # one line per minute on stderr: the run is alive
        for _ in range(10_000):
            await asyncio.sleep(60)
            statuses = Counter(t.status for t in turns)
            first = next((f"{t.status}: {t.message}"[:200] for t in turns if t.status != "ok"),
                         "")
            print(f"soak load generator {block}: {time.time() - t0:.0f} s, turns "
                  f"{dict(statuses)} {first}", file=sys.stderr, flush=True)

    async def main() -> None:
        ticker = asyncio.create_task(progress())
        tasks = [asyncio.create_task(caller(i)) for i in ids]
        # calls started before the deadline may finish their turns, within END_BOUND_S
        await asyncio.wait(tasks, timeout=max(0.0, deadline + END_BOUND_S - time.time()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        ticker.cancel()

    cut = [0]
    asyncio.run(main())
    lag = max((t.send_lag_ms or 0.0) for t in turns) / 1000.0 if turns else 0.0
    return turns, speech[0], lag, cut[0]


async def _in_process(job: tuple, timeout_s: float) -> tuple:
    """`_callers(*job)` in a fresh Python process (arguments and result through pickle files;
    a subprocess rather than multiprocessing, which would re-import the caller's main module)."""
    with tempfile.TemporaryDirectory(prefix="diffvoice-soak-") as tmp:
        job_path, out_path = Path(tmp) / "job.pkl", Path(tmp) / "out.pkl"
        job_path.write_bytes(pickle.dumps(job))
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "from diffvoice.latency_bench.reliability.soak import "
            "_worker_main; _worker_main()", str(job_path), str(out_path))
        try:
            await asyncio.wait_for(proc.wait(), timeout_s)
        except BaseException:  # timed out, or the part was cancelled: leave no caller behind
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
            raise
        if proc.returncode != 0 or not out_path.exists():
            raise RuntimeError(f"soak load-generator process exited {proc.returncode}")
        return pickle.loads(out_path.read_bytes())


def _worker_main() -> None:
    job_path, out_path = Path(sys.argv[1]), Path(sys.argv[2])
    result = _callers(*pickle.loads(job_path.read_bytes()))
    out_path.write_bytes(pickle.dumps(result))


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    duration = scale["soak_s"]
    procs = max(1, scale.get("soak_procs", 1))
    t0 = time.time() + 2.0  # the worker processes start meanwhile
    samples: list[dict[str, float]] = []
    server = {"http": ctx.http, "ws": ctx.ws[: -len("/ws")]}
    groups = [list(range(k, scale["soak_callers"], procs)) for k in range(procs)]

    async def sampler() -> None:
        for _ in range(int(duration / 10) + 100):
            m = await metrics(ctx)
            samples.append({"t": round(time.time() - t0, 1), **{k: m.get(k) for k in SAMPLED}})
            if time.time() > t0 + duration + 120:
                return
            await asyncio.sleep(10)

    sampling = asyncio.create_task(sampler())
    jobs = [(server, list(ctx.prompts), ctx.twilio_token, scale, ids, t0, k + 1)
            for k, ids in enumerate(groups)]
    if procs == 1:  # (the short run) the callers' own event loop in a thread of this process
        results = [await asyncio.to_thread(_callers, *jobs[0])]
    else:
        bound = duration + END_BOUND_S + 120
        results = await asyncio.gather(*(_in_process(job, bound) for job in jobs))
    wall = time.time() - t0
    sampling.cancel()
    await asyncio.gather(sampling, return_exceptions=True)
    after = await settled(ctx, within_s=60, baseline=baseline)
    turns = [t for r in results for t in r[0]]
    speech_s = sum(r[1] for r in results)
    worst_lag_ms = round(max(r[2] for r in results) * 1000.0, 1)
    cut = sum(r[3] for r in results)

    def v2v(lo: float, hi: float) -> list[float]:
        out = []
        for t in turns:
            end = t.speech_end_t
            value = t.stages(True).get("voice_to_voice_ms") if t.status == "ok" else None
            if end is not None and value is not None and lo <= end - t0 < hi:
                out.append(value)
        return out

    first, last = v2v(0, 60), v2v(duration - 60, duration + 120)
    warmup = min(scale["soak_warmup_s"], duration / 3)
    warm = next((s for s in samples if s["t"] >= warmup), samples[0])
    end_sample = samples[-1]
    single = (end_sample[RSS] - warm[RSS]) / warm[RSS] if warm.get(RSS) else None
    growth, warm_peak, end_peak = rss_growth(samples, warmup, duration)
    errors = [f"{t.status}: {t.message}" for t in turns if t.status != "ok"]
    failed = [{"session": t.session, "turn": t.turn, "prompt": t.prompt, "voice": t.voice,
               "at_s": round(t.speech_end_t - t0, 1) if t.speech_end_t else None,
               "status": t.status, "message": t.message, "transcript": t.transcript,
               "bot_text": t.bot_text[:200],
               "timeline": t.timeline}
              for t in turns if t.status != "ok"][:FAILED_KEPT]
    errors += [f"cut: still open {END_BOUND_S:.0f} s after the soak's end"] * cut
    duty = speech_s / (scale["soak_callers"] * wall)
    checks = [
        check("0 failed turns", not errors and bool(turns),
              f"{len(errors)} of {len(turns)}" + (f"; first: {errors[0][:160]}" if errors
                                                   else "")),
        check(f"RSS growth < {RSS_GOAL:.0%} after warm-up", growth is not None and
              growth < RSS_GOAL, (f"peak {warm_peak[RSS] / 2**20:.0f} MB at {warm_peak['t']} s "
                                  f"-> peak {end_peak[RSS] / 2**20:.0f} MB at {end_peak['t']} s "
                                  f"({growth * 100:+.1f}%)") if growth is not None else
              "too few samples"),
        *leak_checks(after, baseline, "after soak"),
    ]
    return {"callers": scale["soak_callers"], "duration_s": duration, "wall_s": round(wall, 1),
            "load_processes": procs, "ramp_s": scale["soak_ramp_s"],
            "warmup_s": warmup, "turns": len(turns), "errors": len(errors),
            "error_examples": errors[:5], "failed_turns": failed, "cut_turns": cut,
            "duty_cycle_speech": round(duty, 3),
            "pause_s": scale["soak_pause_s"], "turns_per_call": scale["soak_call_turns"],
            "client_worst_pacing_lag_ms": worst_lag_ms,
            "peak_sessions": max((s.get("diffvoice_active_sessions") or 0) for s in samples),
            "event_loop_lag_ms": _lag_summary(samples, warmup, duration),
            "first_minute": {"turns": len(first), "p50_ms": _p(first, 50), "p99_ms": _p(first, 99)},
            "last_minute": {"turns": len(last), "p50_ms": _p(last, 50), "p99_ms": _p(last, 99)},
            "rss_growth": round(growth, 4) if growth is not None else None,
            "rss_growth_samples": round(single, 4) if single is not None else None,
            "samples": samples, "checks": checks}
