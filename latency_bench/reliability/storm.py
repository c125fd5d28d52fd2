"""Barge-in storm: callers interrupt the bot at random moments, over and over.

Contract: `await run(ctx, scale)`: `storm_sessions` browser calls share `storm_interruptions`
interruptions. One cycle: speak a prompt, stream silence until the answer's first audio, wait a
random 0-1.2 s (uniform, seeded) while it plays, speak the next prompt over it (the barge-in),
then hear that answer to its end. Just before the barge-in the harness reads this session's
engine request ids from /healthz (voice-<session_id>-...); at the `playback.flush` it reads the
engine passes counter and polls until those of them still in flight (the interrupted answer) are
gone, recording how many passes that took. Checks: every barge-in got a
flush; the interrupted request was gone within one engine pass of the flush being seen; no bot
audio between a flush and the next final transcript (stale audio); never two answers to one user
turn (latency `turn` numbers unique, and every answer follows a user turn that ended since the
previous answer began: `user_turn_ends` >= 1; see `_audit`).
The driver is built from the load client's own parts (browser_client's prompt streaming, Pacer).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.browser_client import FRAME_SAMPLES, SILENCE, _stream_prompt
from diffvoice.latency_bench.corpus import SAMPLE_RATE
from diffvoice.latency_bench.pacer import Pacer
from diffvoice.latency_bench.reliability.common import (
    Ctx,
    check,
    health,
    leak_checks,
    metrics,
    next_ip,
)
from diffvoice.latency_bench.reliability.common import settled as settle
from diffvoice.voice.transport import protocol


class _Session:
    def __init__(self) -> None:
        self.session_id = ""
        self.events: list[tuple[float, Any]] = []  # (t, event or "audio")
        self.first_audio_after: float | None = None
        self.flushes: asyncio.Queue = asyncio.Queue()
        self.closed: str | None = None
        self.last_audio_t = 0.0

    def audio_since(self, t: float) -> bool:
        return self.last_audio_t > t


async def _read(ws, s: _Session) -> None:
    try:
        async for message in ws:
            now = time.monotonic()
            if isinstance(message, bytes):
                s.events.append((now, "audio"))
                s.last_audio_t = now
                continue
            event = protocol.decode_server(message)
            s.events.append((now, event))
            if isinstance(event, protocol.PlaybackFlush):
                s.flushes.put_nowait(now)
    except ConnectionClosed as e:
        s.closed = f"closed: {e}"


async def _wait(pacer: Pacer, until, limit_s: float) -> bool:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if until():
            return True
        await pacer.send(SILENCE)
    return False


async def _session_requests(ctx: Ctx, sid: str) -> set[str]:
    info = await health(ctx)
    return {r for r in info.get("engine_request_ids", []) if r.startswith(f"voice-{sid}-")}


async def _cancel_passes(ctx: Ctx, sid: str, before_barge: set[str]) -> int | None:
    """Engine passes from the flush until the interrupted request is gone (None: > 2 s).

    The interrupted request is one this session had in flight just before the barge-in began
    and still has when the flush is seen. Requests that start during the barge-in (drafts of
    its interim transcripts, eager drafting) are the next answer's, not waited for."""
    info = await health(ctx)
    start = info["engine"].get("passes", 0)
    interrupted = before_barge & {r for r in info.get("engine_request_ids", [])
                                  if r.startswith(f"voice-{sid}-")}
    for _ in range(100):
        if not interrupted & set(info.get("engine_request_ids", [])):
            return info["engine"].get("passes", 0) - start
        await asyncio.sleep(0.02)
        info = await health(ctx)
    return None


async def _storm_call(ctx: Ctx, rng: random.Random, cycles: int, out: dict) -> None:
    s = _Session()
    async with connect(ctx.ws, ping_interval=None, max_size=2**22,
                       local_addr=(next_ip(), 0)) as ws:
        await ws.send(protocol.SessionStart(config={}).encode())
        started = protocol.decode_server(await asyncio.wait_for(ws.recv(), 60))
        s.session_id = started.session_id
        reader = asyncio.create_task(_read(ws, s))
        pacer = Pacer(ws.send, FRAME_SAMPLES / SAMPLE_RATE)
        try:
            for _ in range(cycles):
                prompt, barge = rng.sample(list(ctx.prompts), 2)
                mark = time.monotonic()
                await _stream_prompt(pacer, prompt)
                if not await _wait(pacer, lambda m=mark: s.audio_since(m), 45):
                    out["no_answer"] += 1
                    continue
                delay_until = time.monotonic() + rng.uniform(0.0, 1.2)
                await _wait(pacer, lambda d=delay_until: time.monotonic() >= d, 2)
                while not s.flushes.empty():
                    s.flushes.get_nowait()
                in_flight = await _session_requests(ctx, s.session_id)
                barge_t = time.monotonic()
                flush_task = asyncio.create_task(s.flushes.get())
                await _stream_prompt(pacer, barge)
                out["interruptions"] += 1
                if not await _wait(pacer, flush_task.done, 10):
                    flush_task.cancel()
                    out["bot_finished_first"] += 1  # the answer ended before the barge-in
                else:
                    out["flushes"] += 1
                    passes = await _cancel_passes(ctx, s.session_id, in_flight)
                    out["cancel_passes"].append(passes)
                out["barge_delays_s"].append(round(time.monotonic() - barge_t, 2))
                quiet = time.monotonic()
                await _wait(pacer, lambda q=quiet: time.monotonic() - max(s.last_audio_t, q) > 2,
                            45)
        finally:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    out["sessions"].append(s)


def _audit(s: _Session) -> tuple[int, int, int, int, list[dict]]:
    """(stale audio frames, duplicate latency turns, answers without a user turn, answers to a
    user turn without words, examples of the last two).

    One answer = one `latency` event (the server sends exactly one per answer the caller hears;
    a tool call and its re-prompt are one answer, voice.turn_tracker). An answer is a double when
    no user turn ended since the previous answer began (`user_turn_ends` == 0): the pipeline
    answered one turn twice. Answers are not counted per final transcript: a user turn can end
    without one (speech the ASR did not recognise; pipecat's empty-turn recovery then asks the
    caller to repeat), and its answer would look like a second answer to the previous
    transcript. Those are counted apart, not failed. (Counting bot.started_speaking would not
    do: a starved TTS pauses between clauses, and the bot then starts speaking twice within one
    answer.)"""
    stale, flushed = 0, False
    doubles, wordless = 0, 0
    examples: list[dict] = []
    turns = Counter()
    for _, e in s.events:
        if isinstance(e, protocol.PlaybackFlush):
            flushed = True
        elif isinstance(e, protocol.Transcript) and e.final:
            flushed = False
        elif isinstance(e, protocol.Latency):
            turns[e.turn] += 1
            double = e.user_turn_ends == 0
            doubles += double
            wordless += not double and not e.user_text.strip()
            if (double or not e.user_text.strip()) and len(examples) < 5:
                examples.append({"session": s.session_id, "turn": e.turn,
                                 "double": double, "user_turn_ends": e.user_turn_ends,
                                 "user_text": e.user_text, "bot_text": e.bot_text[:80],
                                 "tool_calls": e.tool_calls})
        elif e == "audio" and flushed:
            stale += 1
    return stale, sum(v - 1 for v in turns.values() if v > 1), doubles, wordless, examples


async def run(ctx: Ctx, scale: dict) -> dict[str, Any]:
    baseline = await metrics(ctx)
    n, total = scale["storm_sessions"], scale["storm_interruptions"]
    rng = random.Random(5)
    out = {"interruptions": 0, "flushes": 0, "bot_finished_first": 0, "no_answer": 0,
           "cancel_passes": [], "barge_delays_s": [], "sessions": []}
    cycles = [total // n + (i < total % n) for i in range(n)]
    await asyncio.gather(*(_storm_call(ctx, random.Random(rng.random()), c, out)
                           for c in cycles))
    after = await settle(ctx, baseline=baseline)
    audits = [_audit(s) for s in out.pop("sessions")]
    stale = sum(a[0] for a in audits)
    dup_turns = sum(a[1] for a in audits)
    doubles = sum(a[2] for a in audits)
    wordless = sum(a[3] for a in audits)
    examples = [x for a in audits for x in a[4]][:10]
    passes = out["cancel_passes"]
    slow = [p for p in passes if p is None or p > 1]
    checks = [
        check(f"{total} barge-ins made", out["interruptions"] == total,
              f"{out['interruptions']} (no first answer: {out['no_answer']})"),
        check("every barge-in during an answer got playback.flush",
              out["flushes"] + out["bot_finished_first"] == out["interruptions"],
              f"{out['flushes']} flushes, {out['bot_finished_first']} answers had ended"),
        check("interrupted engine request gone within one pass of the flush", not slow,
              f"passes after flush: {dict(Counter(passes))}"),
        check("no stale bot audio between a flush and the next transcript", stale == 0,
              f"{stale} frames"),
        check("no double answers", dup_turns == 0 and doubles == 0,
              f"duplicate latency turns {dup_turns}, answers without a new user turn {doubles}"
              f" (answers to a user turn without words, not failed: {wordless})"),
        *leak_checks(after, baseline, "after storm"),
    ]
    return {**out, "stale_frames": stale, "double_answers": doubles,
            "wordless_turn_answers": wordless, "answer_examples": examples, "checks": checks}
