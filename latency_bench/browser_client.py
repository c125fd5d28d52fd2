"""One simulated caller over the browser wire protocol (docs/protocol.md), measuring each turn.

Contract: `await run_browser_session(config, url, session, prompts, concurrency, on_turn)` opens
one WebSocket, sends `session.start` (with `stop_secs` when configured), then for each prompt:

1. streams the prompt as 20 ms frames of 16 kHz PCM paced by the clock (`Pacer`), and takes the
   end of user speech from the audio (`Prompt.speech_end_s`, the frame's send time);
2. keeps streaming silence, as an open microphone does, until the turn is over: the server's
   `latency` event arrived, the bot stopped speaking, the client's playback queue (`Playout`,
   at the announced output rate) has played the answer, and no bot audio came for
   `bot_quiet_s`; or until `turn_timeout_s` after the end of speech (status "timeout");
3. streams `pause_s` of silence, then the next prompt.

It calls `on_turn(TurnResult)` once per prompt, in order, whatever happens: a server `error`
event, a closed socket or a failed connect marks the current and all remaining turns "error"
with the reason. A `latency` event that arrives while the prompt is still streaming means the
server cut the user's turn in two, and bot audio arriving before the prompt's last speech
means the server answered too early or the previous answer was not over: both mark the turn
"error" and `premature_eot` (never a negative or misattributed latency); an answer that starts
in the prompt's trailing silence, after its last speech, is a normal turn. `session.started` is
returned (or None) so the caller can record model, ASR, TTS and stop_secs.
Knows nothing about reports or other sessions.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt
from diffvoice.latency_bench.pacer import Pacer
from diffvoice.latency_bench.playout import Playout
from diffvoice.latency_bench.source_addr import connect_kwargs
from diffvoice.latency_bench.turns import TurnResult, planned_turn
from diffvoice.voice.transport import protocol

FRAME_SAMPLES = SAMPLE_RATE // 50          # 20 ms
SILENCE = bytes(2 * FRAME_SAMPLES)
TIMELINE_MAX = 60                          # events kept per turn (bounded evidence)


class _State:
    """What the reader task learned from the server, for the turn now in progress."""

    def __init__(self, output_rate: int, threshold_db: float) -> None:
        self.playout = Playout(output_rate, threshold_db)
        self.error: str | None = None
        self.latencies: list[dict[str, Any]] = []
        self.latency_times: list[float] = []       # arrival (client clock) of each latency
        self.transcript: str | None = None
        self.bot_text: list[str] = []
        self.bot_speaking = False
        self.bot_spoke = False
        self.timeline: list[list] = []
        self.turn_t0 = time.time()

    def note(self, now: float, what: str) -> None:
        if len(self.timeline) < TIMELINE_MAX:
            self.timeline.append([round(now - self.turn_t0, 3), what])

    def start_turn(self) -> None:
        self.timeline = []
        self.turn_t0 = time.time()
        self.playout.start_turn()
        self.latencies = []
        self.latency_times = []
        self.transcript = None
        self.bot_text = []
        self.bot_spoke = False


async def _read(ws: Any, state: _State) -> None:
    try:
        async for message in ws:
            now = time.time()
            if isinstance(message, bytes):
                if state.playout.last_frame_t is None:
                    state.note(now, "first bot audio frame")
                state.playout.push(np.frombuffer(message, dtype="<i2"), now)
                continue
            event = protocol.decode_server(message)
            if isinstance(event, protocol.Transcript) and event.final:
                # one final per speech segment: a turn with pauses has several
                state.transcript = f"{state.transcript or ''} {event.text}".strip()
                state.note(now, f"transcript {event.text!r}")
            elif isinstance(event, protocol.BotText):
                state.bot_text.append(event.text)
                state.note(now, f"bot.text {event.text[:60]!r}")
            elif isinstance(event, protocol.BotStartedSpeaking):
                state.bot_speaking = state.bot_spoke = True
                state.note(now, "bot.started_speaking")
            elif isinstance(event, protocol.BotStoppedSpeaking):
                state.bot_speaking = False
                state.note(now, "bot.stopped_speaking")
            elif isinstance(event, protocol.PlaybackFlush):
                state.playout.flush(now)
                state.note(now, "playback.flush")
            elif isinstance(event, protocol.Latency):
                fields = event.to_dict()
                state.latencies.append(fields)
                state.latency_times.append(now)
                state.note(now, f"latency: user_turn_ends {fields.get('user_turn_ends')}, "
                                f"speech_end_t {_rel(fields.get('speech_end_t'), state)}, "
                                f"vad_stop_t {_rel(fields.get('vad_stop_t'), state)}, "
                                f"turn_end_t {_rel(fields.get('turn_end_t'), state)}, "
                                f"user_text {fields.get('user_text', '')[:80]!r}")
            elif isinstance(event, protocol.Error):
                state.error = f"server error {event.code}: {event.message}"
    except ConnectionClosed as exc:
        state.error = state.error or f"connection closed: {exc}"
    except (ValueError, protocol.ProtocolError) as exc:
        state.error = f"undecodable server message: {exc}"
    else:
        state.error = state.error or "connection closed by the server"


def _rel(t: Any, state: _State) -> float | None:
    return round(t - state.turn_t0, 3) if isinstance(t, int | float) else None


def _turn_over(state: _State, now: float, quiet_s: float) -> bool:
    """The answer was heard to its end: latency event in, playback done, bot not speaking, and
    no bot audio for `quiet_s`. The quiet period matters: a starved server says
    bot.stopped_speaking between two clauses and resumes when the next clause is synthesised."""
    if not state.latencies or state.playout.first_audible_t is None:
        return False
    if now < state.playout.playing_until(now) - 1e-3:
        return False                                    # still playing the answer
    if state.bot_speaking:
        return False
    last = state.playout.last_frame_t or 0.0
    return now - last >= quiet_s


def _still_speaking(state: _State, now: float) -> str:
    """Which condition of `_turn_over` kept the turn open (for the timeout message)."""
    playout = state.playout
    received = playout.samples_received / playout.sample_rate
    queued = playout.playing_until(now) - now
    last = now - (playout.last_frame_t or now)
    why = ("playback queue not drained" if queued > 1e-3 else
           "no bot.stopped_speaking" if state.bot_speaking else "bot audio still arriving")
    return (f"{why}; {received:.1f} s of audio received, {queued:.1f} s queued, last frame "
            f"{last:.1f} s ago")


async def _stream_prompt(pacer: Pacer, prompt: Prompt) -> float:
    """Send the prompt in paced frames; return the epoch time the user stopped speaking."""
    pcm = prompt.pcm
    padded = np.zeros(-(-len(pcm) // FRAME_SAMPLES) * FRAME_SAMPLES, dtype="<i2")
    padded[: len(pcm)] = pcm
    end_sample = int(round(prompt.speech_end_s * SAMPLE_RATE))
    end_frame = max(0, (end_sample - 1) // FRAME_SAMPLES)
    speech_end_t = 0.0
    for k in range(len(padded) // FRAME_SAMPLES):
        sent_t = await pacer.send(padded[k * FRAME_SAMPLES:(k + 1) * FRAME_SAMPLES].tobytes())
        if k == end_frame:
            # the frame holds audio up to (k+1)*FRAME; speech ended that many samples earlier
            speech_end_t = sent_t - ((k + 1) * FRAME_SAMPLES - end_sample) / SAMPLE_RATE
    return speech_end_t


async def _run_turn(config: BenchConfig, pacer: Pacer, state: _State, prompt: Prompt,
                    result: TurnResult) -> None:
    state.start_turn()
    pacer.take_lag_s()
    result.speech_end_t = await _stream_prompt(pacer, prompt)
    state.note(result.speech_end_t, "caller's speech ended (from the audio)")
    # an answer inside the prompt's trailing silence is fine; before its last speech it is not
    early = [i for i, t in enumerate(state.latency_times) if t < result.speech_end_t]
    if early:
        result.premature_eot = True
        result.fail("error", "the server ended the user turn before the prompt ended "
                             "(premature end of turn)")
        state.latencies = [x for i, x in enumerate(state.latencies) if i not in early]
        state.latency_times = [t for i, t in enumerate(state.latency_times) if i not in early]
    elif (state.playout.first_frame_t is not None
          and state.playout.first_frame_t < result.speech_end_t):
        result.premature_eot = True
        result.fail("error", "bot audio arrived while the caller was speaking (premature end "
                             "of turn, or the previous answer resumed after a pause longer "
                             "than --bot-quiet-s)")
    deadline = result.speech_end_t + config.turn_timeout_s
    while state.error is None and not _turn_over(state, time.time(), config.bot_quiet_s):
        if time.time() > deadline:
            missing = ("no latency event" if not state.latencies else
                       "no audible bot audio" if state.playout.first_audible_t is None else
                       f"bot still speaking: {_still_speaking(state, time.time())}")
            result.fail("timeout", f"turn not over {config.turn_timeout_s:.0f} s after the "
                                   f"end of speech ({missing})")
            break
        await pacer.send(SILENCE)
    result.send_lag_ms = pacer.take_lag_s() * 1000.0
    result.transcript = state.transcript
    result.bot_text = "".join(state.bot_text)
    result.first_frame_t = state.playout.first_frame_t
    result.first_audible_t = state.playout.first_audible_t
    result.last_frame_t = state.playout.last_frame_t
    result.last_audible_end_t = state.playout.last_audible_end_t
    # by time only: events that arrived in the same millisecond keep their arrival order
    result.timeline = sorted(state.timeline, key=lambda event: event[0])
    if state.latencies:
        result.server = state.latencies[0]
        turn_end_t = result.server.get("turn_end_t")
        if (result.status == "ok" and config.shared_clock
                and isinstance(turn_end_t, (int, float))
                and turn_end_t < result.speech_end_t - 0.05):
            result.premature_eot = True   # shared clock: the turn ended before speech did
            result.fail("error", "the server ended the user turn before the prompt's last "
                                 "speech (premature end of turn)")
        ends = result.server.get("user_turn_ends")
        if result.status == "ok" and isinstance(ends, int) and ends > 1:
            result.premature_eot = True   # cut at a pause; that answer was dropped unheard
            result.fail("error", f"the server ended the user turn {ends} times during the "
                                 "prompt (premature end of turn)")
        if result.server.get("interrupted") and result.status == "ok":
            result.fail("error", "the server reports this turn as interrupted")
        if result.server.get("reprompt") and result.status == "ok":
            result.fail("error", "no answer: the server heard speech but no words and asked "
                                 "the caller to say it again")
    if state.error is not None and result.status == "ok":
        result.fail("error", state.error)


async def run_browser_session(config: BenchConfig, url: str, session: int,
                              prompts: Sequence[Prompt], concurrency: int,
                              on_turn: Callable[[TurnResult], None]) -> dict[str, Any] | None:
    results = [planned_turn(p, concurrency, session, i + 1) for i, p in enumerate(prompts)]
    reported = 0
    started: dict[str, Any] | None = None
    reader: asyncio.Task | None = None
    try:
        async with connect(url, open_timeout=config.connect_timeout_s, max_size=2**22,
                           ping_interval=None, **connect_kwargs()) as ws:
            overrides = {k: getattr(config, k) for k in ("stop_secs", "turn_window_secs",
                                                         "eager_drafts")
                         if getattr(config, k) is not None}
            await ws.send(protocol.SessionStart(config=overrides).encode())
            first = await asyncio.wait_for(ws.recv(), config.connect_timeout_s)
            event = protocol.decode_server(first) if isinstance(first, str) else None
            if not isinstance(event, protocol.SessionStarted):
                raise RuntimeError(f"expected session.started, got {str(first)[:200]!r}")
            started = event.to_dict()
            state = _State(event.output_sample_rate, config.energy_threshold_db)
            reader = asyncio.create_task(_read(ws, state))
            pacer = Pacer(ws.send, FRAME_SAMPLES / SAMPLE_RATE)
            for prompt, result in zip(prompts, results, strict=True):
                await _run_turn(config, pacer, state, prompt, result)
                on_turn(result)
                reported += 1
                if state.error is not None:
                    raise RuntimeError(state.error)
                pause_until = time.time() + config.pause_s
                while time.time() < pause_until:
                    await pacer.send(SILENCE)
    except Exception as exc:   # any failure ends this session only; its turns are counted
        message = str(exc) or type(exc).__name__
        for result in results[reported:]:
            result.fail("error", f"session ended early: {message}")
            on_turn(result)
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    return started
