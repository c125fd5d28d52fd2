"""One admitted Twilio call: its pipeline over the Media Stream transport, from the stream's
`start` to its end, and the records it writes.

`run_call(state, cfg, calls, ws, start, build_pipeline, status_log, limits)` starts the call
(voice.call.start_call; `build_pipeline` None: the real pipeline, else a test's stand-in
builder) over TwilioMediaStreamTransport with a PlayoutTracker, runs it until Twilio sends
`stop`, the socket drops, a limit expires (`CallLimits`: idle — less than a second of caller
audio in idle_timeout_s, empty media do not count —, maximum duration; malformed messages: 1007;
more messages a second than `message_rate` allows: 1008 "message_rate"), the call's audio output
stalls (1013 "output_stalled") or the pipeline ends, and cleans up: the call leaves `calls`
(ActiveCalls), the server's session count and metrics, and its start and end go to the status
log. Each turn's record, enriched with when the caller heard the answer, goes to the latency log
(`log_writer`: the server's shared LatencyLog when it is the same file, else appended as JSON
lines). voice.telephony.twilio admits the stream first (token, single use, phone slots,
capacity); this module knows nothing about webhooks or admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field

from fastapi import WebSocket

from diffvoice.agent.owner import phone_owner
from diffvoice.voice import malloc_tune
from diffvoice.voice.call_limits import CallWatchdog
from diffvoice.voice.telephony.handshake import CLOSE_INVALID_PAYLOAD, CLOSE_POLICY, StreamStart
from diffvoice.voice.telephony.media_stream import (
    TWILIO_SAMPLE_RATE,
    CallSerializer,
    TwilioMediaStreamTransport,
)
from diffvoice.voice.telephony.playout import PlayoutTracker

logger = logging.getLogger(__name__)

_PLAYOUT_FIELDS = (
    "turn", "session_id", "interrupted", "vad_stop_t", "first_audio_sent_t", "server_ms",
    "first_chunk_written_t", "first_audio_heard_t", "playout_ms", "heard_ms", "playout",
    "call_sid", "stream_sid",
)  # fmt: skip
_log_lock = threading.Lock()
CLOSE_CODES = {"malformed_messages": CLOSE_INVALID_PAYLOAD, "output_stalled": 1013}  # else 1008


def log_writer(state, path: str | None) -> Callable[[dict], None]:
    """Writes to the server's shared LatencyLog when it is the same file, else appends."""
    shared = getattr(state, "latency_log", None)
    if path and shared is not None and str(getattr(shared, "path", "")) == str(path):
        return shared.write
    return lambda record: append_jsonl(path, record)


def append_jsonl(path: str | None, record: dict) -> None:
    if not path:
        return
    line = json.dumps(record, separators=(",", ":")) + "\n"
    try:
        with _log_lock, open(path, "a", encoding="utf-8") as f:
            f.write(line)
    except OSError as e:
        logger.warning("cannot append to %s: %s", path, e)


@dataclass
class Call:
    call_sid: str
    stream_sid: str
    session_id: str
    started_t: float
    running: object = None  # its voice.call.Call
    stopped_by_twilio: bool = False


@dataclass
class ActiveCalls:
    """Calls whose pipeline is running, by CallSid."""

    calls: dict[str, Call] = field(default_factory=dict)
    finished: int = 0

    def __len__(self) -> int:
        return len(self.calls)


@dataclass(frozen=True)
class CallLimits:
    handshake_timeout_s: float = 10.0
    idle_timeout_s: float = 30.0
    max_call_s: float = 3600.0

    @classmethod
    def from_config(cls, config) -> CallLimits:
        return cls(**{f: float(getattr(config, f, d)) for f, d in (
            ("handshake_timeout_s", 10.0), ("idle_timeout_s", 30.0), ("max_call_s", 3600.0))})


async def run_call(
    state, cfg, calls: ActiveCalls, ws: WebSocket, start: StreamStart, build_pipeline, status_log,
    limits: CallLimits | None = None, message_rate=None,
) -> None:
    from diffvoice.voice.call import start_call

    call = Call(start.call_sid, start.stream_sid, f"twilio-{uuid.uuid4().hex[:12]}", time.time())
    extra = {"transport": "twilio", "call_sid": call.call_sid, "stream_sid": call.stream_sid}

    latency_log = log_writer(state, cfg.latency_log)

    def emit(record: dict) -> None:
        playout = {k: record.get(k) for k in _PLAYOUT_FIELDS}
        try:
            latency_log({"type": "telephony.playout", **playout})
        except Exception as e:  # a full disk must not end the call
            logger.warning("twilio %s: playout log write failed: %r", call.call_sid, e)

    tracker = PlayoutTracker(emit, wait_for_echo_s=cfg.wait_for_echo_s, extra_fields=extra)
    def end_call(reason: str) -> None:
        if call.running is not None:  # it waits for the pipeline's start to cancel
            call.running.cancel(reason)

    def on_stop() -> None:
        call.stopped_by_twilio = True
        end_call("twilio stop")

    serializer = CallSerializer(
        stream_sid=start.stream_sid,
        call_sid=start.call_sid,
        tracker=tracker,
        on_stop=on_stop,
        account_sid=start.account_sid or cfg.twilio_account_sid,
        auth_token=cfg.twilio_auth_token,
    )
    serializer.message_rate = message_rate  # None: the WebSocket protocol counts messages
    limits = limits or CallLimits()

    async def expire(reason: str) -> None:
        # idle_timeout / max_duration / malformed_messages: say why, then end this call only
        logger.warning("twilio %s: closing stream: %s", call.call_sid, reason)
        end_call(reason)
        code = CLOSE_CODES.get(reason, CLOSE_POLICY)
        with contextlib.suppress(Exception):
            await ws.close(code=code, reason=reason)

    watchdog = CallWatchdog(limits.idle_timeout_s, limits.max_call_s, expire)
    serializer.on_media = watchdog.heard
    serializer.on_malformed_limit = lambda: asyncio.create_task(expire("malformed_messages"))
    serializer.on_message_flood = lambda: watchdog.fire("message_rate")
    transport = TwilioMediaStreamTransport(ws, serializer=serializer, tracker=tracker)
    transport.output().on_output_stalled = lambda: watchdog.fire("output_stalled")
    running = start_call(
        state,
        transport,
        build=build_pipeline,
        session_id=call.session_id,
        # The pipeline's output runs at Twilio's 8 kHz, so the output transport resamples the
        # TTS audio *before* cutting it into 20 ms chunks: every media message carries 20 ms
        # (160 mu-law bytes). Resampling after chunking (in the serializer) made soxr's
        # streaming resampler emit ~95-150 ms bursts instead.
        audio_out_sample_rate=TWILIO_SAMPLE_RATE,
        on_latency=lambda record: tracker.on_latency(record, time.time()),
        # bookings belong to the caller's number (bound to the stream token with the CallSid)
        caller=phone_owner(start.custom_parameters.get("From"), start.call_sid),
    )
    call.running = running

    @transport.event_handler("on_client_connected")
    async def _on_connected(_transport, _ws):
        # the pipeline is up and reading: the idle clock starts now, not while it was built
        watchdog.touch()
        watchdog.start()

    @transport.event_handler("on_client_disconnected")
    async def _on_disconnected(_transport, _ws):
        end_call("socket closed")

    calls.calls[call.call_sid] = call
    sessions = getattr(state, "active_sessions", None)
    metrics = getattr(state, "metrics", None)
    if sessions is not None:
        sessions.add(call.session_id)
    if metrics is not None:
        metrics.session_opened()
    logger.info("twilio %s: call started (%s)", call.call_sid, call.session_id)
    status_log({"type": "twilio.stream", "t": time.time(), "event": "start", **extra})
    try:
        await asyncio.shield(running.done)
    finally:
        await watchdog.stop()
        # cancels a pipeline still running (this task was cancelled: server shutdown), awaits
        # it, and flushes a turn that never produced audio, so its record is still written
        await running.close("call ended")
        tracker.close(time.time())
        calls.calls.pop(call.call_sid, None)
        if sessions is not None:
            sessions.discard(call.session_id)
        if metrics is not None:
            metrics.session_closed()
        if getattr(state.config, "malloc_arena_max", 0):
            malloc_tune.trim_soon()  # the call's native buffers back to the OS
        calls.finished += 1
        duration = round(time.time() - call.started_t, 3)
        end = {"type": "twilio.stream", "t": time.time(), "event": "end", "duration_s": duration}
        end["closed_by_server"] = watchdog.expired or (
            "malformed_messages" if serializer.malformed_limit_hit else None)
        status_log({**end, "stopped_by_twilio": call.stopped_by_twilio, **extra})
        logger.info("twilio %s: call ended after %.1f s", call.call_sid, duration)
