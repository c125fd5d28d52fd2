"""One simulated caller over the OpenAI Realtime protocol (`/v1/realtime`, docs/realtime.md),
measuring each turn exactly as the browser client does (latency_bench.browser_client).

Contract: `await run_realtime_session(config, url, session, prompts, concurrency, on_turn)`
connects to `url` (ws://HOST:PORT/v1/realtime?model=...), waits for `session.created`, sends
`session.update` (the server's own turn detection, `server_vad`, with `--stop-secs` as its
silence_duration_ms when given), then runs the browser client's turn loop over the same paced
20 ms frames: each frame is resampled to 24 kHz (`audio/pcm`, soxr, one stream per session) and
sent as `input_audio_buffer.append`. What the server sends is read into the browser client's
`_State`:
* `response.output_audio.delta` -> the playout queue (24 kHz), whose first audible sample
  gives voice-to-voice, as over /ws;
* `input_audio_buffer.speech_stopped` -> the time the server's VAD said the caller stopped
  (`speech_stopped_t`), and `server["speech_stopped_to_audio_ms"]`: from that event's arrival to
  the first `response.output_audio.delta`'s (both on the client's clock);
* `conversation.item.input_audio_transcription.completed` -> the transcript;
  `response.output_audio_transcript.delta` -> the bot's text; `response.created` / `done` ->
  bot speaking; `response.done` is the turn's end marker (the browser protocol's latency event),
  with its status: a cancelled response is an interrupted turn;
* `error` -> the turn fails with the server's code and message.
Knows nothing about reports or other sessions.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import soxr
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.browser_client import FRAME_SAMPLES, SILENCE, _run_turn, _State
from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt
from diffvoice.latency_bench.pacer import Pacer
from diffvoice.latency_bench.source_addr import connect_kwargs
from diffvoice.latency_bench.turns import TurnResult, planned_turn

REALTIME_RATE = 24000


class _Realtime(_State):
    def __init__(self, threshold_db: float) -> None:
        super().__init__(REALTIME_RATE, threshold_db)
        self.speech_stopped_t: float | None = None
        self.first_delta_t: float | None = None

    def start_turn(self) -> None:
        super().start_turn()
        self.speech_stopped_t = self.first_delta_t = None


async def _read(ws: Any, state: _Realtime) -> None:
    try:
        async for message in ws:
            now = time.time()
            event = json.loads(message)
            kind = event.get("type")
            if kind == "response.output_audio.delta":
                if state.first_delta_t is None:
                    state.first_delta_t = now
                    state.note(now, "first response.output_audio.delta")
                pcm = np.frombuffer(base64.b64decode(event["delta"]), dtype="<i2")
                state.playout.push(pcm, now)
            elif kind == "input_audio_buffer.speech_stopped":
                state.speech_stopped_t = now
                state.note(now, "speech_stopped")
            elif kind == "conversation.item.input_audio_transcription.completed":
                text = event.get("transcript") or ""
                state.transcript = f"{state.transcript or ''} {text}".strip()
                state.note(now, f"transcript {text!r}")
            elif kind == "response.output_audio_transcript.delta":
                state.bot_text.append(event.get("delta", ""))
            elif kind == "response.created":
                state.bot_speaking = state.bot_spoke = True
                state.note(now, "response.created")
            elif kind == "response.done":
                state.bot_speaking = False
                status = event.get("response", {}).get("status")
                record: dict[str, Any] = {"response_status": status,
                                          "interrupted": status == "cancelled"}
                if state.speech_stopped_t is not None and state.first_delta_t is not None:
                    record["speech_stopped_to_audio_ms"] = round(
                        (state.first_delta_t - state.speech_stopped_t) * 1000.0, 2)
                state.latencies.append(record)
                state.latency_times.append(now)
                state.note(now, f"response.done ({status})")
            elif kind == "error":
                error = event.get("error", {})
                state.error = f"server error {error.get('code')}: {error.get('message')}"
    except ConnectionClosed as exc:
        state.error = state.error or f"connection closed: {exc}"
    except (ValueError, KeyError, TypeError) as exc:
        state.error = f"undecodable server message: {exc!r}"
    else:
        state.error = state.error or "connection closed by the server"


class _Appender:
    """The pacer's send: a 16 kHz frame -> 24 kHz, as one input_audio_buffer.append."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        # "QQ" holds back 0.1 ms (soxr's default "HQ" 21 ms, which the caller's end of speech
        # would reach the server later by, as no 24 kHz microphone delays it)
        self._resampler = soxr.ResampleStream(SAMPLE_RATE, REALTIME_RATE, 1, dtype="int16",
                                              quality="QQ")

    async def send(self, frame: bytes) -> None:
        pcm = self._resampler.resample_chunk(np.frombuffer(frame, dtype="<i2"))
        await self.ws.send(json.dumps({"type": "input_audio_buffer.append",
                                       "audio": base64.b64encode(pcm.tobytes()).decode()}))


async def run_realtime_session(config: BenchConfig, url: str, session: int,
                               prompts: Sequence[Prompt], concurrency: int,
                               on_turn: Callable[[TurnResult], None]) -> dict[str, Any] | None:
    results = [planned_turn(p, concurrency, session, i + 1) for i, p in enumerate(prompts)]
    reported = 0
    started: dict[str, Any] | None = None
    reader: asyncio.Task | None = None
    try:
        async with connect(url, open_timeout=config.connect_timeout_s, max_size=2**22,
                           ping_interval=None, **connect_kwargs()) as ws:
            first = json.loads(await asyncio.wait_for(ws.recv(), config.connect_timeout_s))
            if first.get("type") != "session.created":
                raise RuntimeError(f"expected session.created, got {str(first)[:200]!r}")
            turn_detection: dict[str, Any] = {"type": "server_vad"}
            if config.stop_secs is not None:
                turn_detection["silence_duration_ms"] = round(config.stop_secs * 1000)
            await ws.send(json.dumps({"type": "session.update", "session": {
                "type": "realtime", "audio": {"input": {"turn_detection": turn_detection}}}}))
            while True:  # conversation.created may come first
                updated = json.loads(await asyncio.wait_for(ws.recv(),
                                                            config.connect_timeout_s))
                if updated.get("type") == "session.updated":
                    break
                if updated.get("type") == "error":
                    raise RuntimeError(f"session.update refused: {updated.get('error')}")
            session_obj = updated["session"]
            started = {"protocol": "realtime", "session": session,
                       "model": session_obj.get("model"),
                       "server_session_id": session_obj.get("id"),
                       "output_sample_rate": REALTIME_RATE,
                       "stop_secs": (session_obj["audio"]["input"]["turn_detection"] or {}).get(
                           "silence_duration_ms", 0) / 1000.0}
            state = _Realtime(config.energy_threshold_db)
            reader = asyncio.create_task(_read(ws, state))
            pacer = Pacer(_Appender(ws).send, FRAME_SAMPLES / SAMPLE_RATE)
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
