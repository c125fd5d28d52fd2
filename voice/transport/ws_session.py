"""One browser call over one WebSocket: protocol handshake, receive loop, pipeline lifetime.

Contract (`serve_browser_session(websocket, state)`, called by the `/ws` route):
1. accept; refuse with an error event and close: "origin_not_allowed" (1008) for a browser page
   from a foreign Origin (voice.access.origin_allowed; the Host header is not trusted),
   "unauthorized" (1008) when
   `config.api_keys` is set and no key/token came (voice.access.ws_credential_ok),
   "too_many_sessions" (1013) past `config.max_sessions_per_ip` for this client IP,
   "overloaded" (1013) past `config.max_sessions`;
2. wait up to `config.handshake_timeout_s` for the first message: `session.start` (its
   overrides apply) or audio / ping (defaults; the message is kept); none -> "handshake_timeout";
3. start the call (voice.call.start_call) over a BrowserTransport, send
   `session.started`;
4. decode every client message with voice.transport.protocol: audio goes into the pipeline,
   `ping` gets `pong`; any ProtocolError sends an `error` event and closes *this* socket with the
   error's
   close code (reason = error code) — other sessions never notice;
5. limits (ServeConfig): less than a second of caller audio (voice.call_limits: empty or tiny
   frames do not count) in `idle_timeout_s` -> "idle_timeout", the call `max_call_s` old ->
   "max_duration" (both 1008, with an error event first); caller audio
   faster than `audio_rate_limit` x real time beyond `audio_burst_s` (voice.ingest_limit) is
   refused frame by frame, never queued, and once the caller is ahead of that rate by twice
   `audio_burst_s` (refused audio counted) -> "audio_too_fast" (1008); more than
   `ws_message_rate` messages a second beyond `ws_message_burst` (every message, whatever it
   carries: voice.transport.message_rate, counted by the keepalive protocol under `diffvoice
   serve`, pings included, else here) -> "message_rate" (1008); browser sessions past
   `browser_session_limit` (the phone callers' share of `max_sessions` is kept) -> "overloaded"
   (1013); the call's audio output can no longer be written (pipecat's output transport gave
   up on a write that took over its timeout, e.g. after an event-loop stall, and marked itself
   unusable) -> "output_stalled" (1013), never a call that stays connected without audio;
6. on any exit (client gone, protocol error, server shutdown) cancel the pipeline, which aborts
   this session's engine request, and report the session closed to the metrics.

All socket writes go through one lock so audio and JSON events keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid

from fastapi import WebSocket
from loguru import logger
from starlette.websockets import WebSocketDisconnect, WebSocketState

from diffvoice.voice import malloc_tune
from diffvoice.voice.access import allowed_origins, origin_allowed, ws_credential_ok
from diffvoice.voice.call import start_call
from diffvoice.voice.call_limits import CallWatchdog, browser_session_limit
from diffvoice.voice.ingest_limit import CLOSE, DROP, IngestLimit, pcm_seconds
from diffvoice.voice.transport import protocol
from diffvoice.voice.transport.browser import BrowserTransport
from diffvoice.voice.transport.message_rate import MessageRate, limit_socket

PIPELINE_READY_SECS = 30.0
SEND_TIMEOUT_SECS = 10.0  # one socket write; longer means the client stopped reading
LIMIT_FIELDS = {"idle_timeout": "idle_timeout_s", "max_duration": "max_call_s",
                "handshake_timeout": "handshake_timeout_s"}  # close reason -> ServeConfig field
OUTPUT_STALLED = "output_stalled"


def _limit_message(reason: str) -> str:
    if reason == OUTPUT_STALLED:
        return ("the call's audio output could not be written in time (the server stalled); "
                "call again")
    return f"closed by the server's {LIMIT_FIELDS[reason]} limit"


class BrowserSession:
    def __init__(self, websocket: WebSocket, state) -> None:
        self.ws = websocket
        self.state = state
        self.session_id = uuid.uuid4().hex[:12]
        self.client_ip = websocket.client.host if websocket.client else "?"
        self._send_lock = asyncio.Lock()
        self._open = True
        self._watchdog: CallWatchdog | None = None  # while the receive loop runs
        self.ingest: IngestLimit | None = None  # made when the call's setup starts (run)
        self.message_rate: MessageRate | None = None  # None: the protocol counts (run)

    # ------------------------------------------------------------------ sending

    async def _send(self, data: str | bytes) -> bool:
        async with self._send_lock:
            if not self._open or self.ws.application_state != WebSocketState.CONNECTED:
                return False
            try:  # a client that stops reading must not hold the session (and its slot)
                send = self.ws.send_bytes if isinstance(data, bytes) else self.ws.send_text
                await asyncio.wait_for(send(data), SEND_TIMEOUT_SECS)
                return True
            except Exception as e:  # the peer went away mid-write, or stopped reading
                logger.debug(f"session {self.session_id}: send failed: {e!r}")
                self._open = False
                return False

    async def send_event(self, event: protocol.Event) -> None:
        await self._send(event.encode())

    async def send_audio(self, pcm: bytes) -> bool:
        return await self._send(pcm)

    async def close(self, code: int, reason: str) -> None:
        async with self._send_lock:
            if self._open and self.ws.application_state == WebSocketState.CONNECTED:
                self._open = False
                with contextlib.suppress(Exception):
                    await self.ws.close(code=code, reason=reason[:120])
            self._open = False

    async def fail(self, error: protocol.ProtocolError) -> None:
        logger.info(f"session {self.session_id}: closing, {error.code}: {error.message}")
        self.state.metrics.observe_error(error.code)
        await self.send_event(error.to_event())
        await self.close(error.close_code, error.code)

    # ------------------------------------------------------------------ receiving

    async def _receive(self) -> str | bytes | None:
        """Next client message, or None when the client disconnected."""
        try:
            message = await self.ws.receive()
        except (WebSocketDisconnect, RuntimeError):
            return None
        if message["type"] == "websocket.disconnect":
            return None
        if self.message_rate is not None and not self.message_rate.admit():
            raise protocol.ProtocolError("message_rate", self.message_rate.describe())
        if message.get("bytes") is not None:
            return message["bytes"]
        if message.get("text") is not None:
            return message["text"]
        return None

    def _refusal(self) -> protocol.ProtocolError | None:
        """Why this socket may not start a session (checked before any pipeline is built)."""
        config, ws = self.state.config, self.ws
        origin = ws.headers.get("origin")
        if not origin_allowed(origin, allowed_origins(config)):
            return protocol.ProtocolError("origin_not_allowed",
                                          f"Origin {origin[:100]!r} may not open sessions here")
        api_keys = tuple(getattr(config, "api_keys", ()) or ())
        if not ws_credential_ok(ws.headers, ws.query_params, api_keys, self.state.session_tokens):
            return protocol.ProtocolError(
                "unauthorized", "this server needs an API key: send 'Authorization: Bearer "
                "<key>' or connect to /ws?token=<token from POST /session-token>")
        if self.state.sessions_open() >= config.max_sessions:
            return protocol.ProtocolError("overloaded", "too many sessions, try later")
        slots = self.state.client_slots
        if not slots.acquire(self.client_ip):
            return protocol.ProtocolError(
                "too_many_sessions", f"this client already holds "
                f"{slots.limit} sessions (max_sessions_per_ip)")
        browsers = browser_session_limit(config)
        if browsers is not None and slots.held() > browsers:  # held() counts this one now
            slots.release(self.client_ip)
            return protocol.ProtocolError(
                "overloaded", f"all {browsers} browser lines are busy (max_browser_sessions; "
                f"the rest of max_sessions is kept for phone callers), try later")
        return None

    async def _next(self, deadline: float, reason: str) -> str | bytes | None:
        """Next client message; ProtocolError(reason) if none arrives before `deadline`."""
        try:
            return await asyncio.wait_for(self._receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            raise protocol.ProtocolError(reason, _limit_message(reason)) from None

    async def _receive_all(self, transport: BrowserTransport, runner_task: asyncio.Task,
                           connected_t: float) -> None:
        """Every client message into the pipeline until the client leaves or a limit fires.

        The limits are watched by one CallWatchdog task, not a timeout per message: a
        `wait_for` per 20 ms frame cost a task and several event-loop turns per message, so on
        a busy loop browser sessions read slower than their callers sent (the soak saw 1.4 MB
        unread per socket) while Twilio calls, read without one, kept up. Messages already
        received are now taken without giving up the loop."""
        config = self.state.config
        receiving = asyncio.current_task()
        watchdog = CallWatchdog(config.idle_timeout_s, config.max_call_s,
                                on_expire=lambda _reason: self._cancel(receiving))
        watchdog.started_at = connected_t
        watchdog.start()
        self._watchdog = watchdog
        if not transport.output().is_usable:  # it gave up before reading started
            watchdog.fire(OUTPUT_STALLED)
        try:
            while True:
                raw = await self._receive()
                if raw is None or runner_task.done() or not self._open:
                    return
                await self._dispatch(raw, transport)
        except asyncio.CancelledError:
            if watchdog.expired is None or receiving.cancelling() > 1:
                raise  # the server is shutting down, not a limit
            receiving.uncancel()
            raise protocol.ProtocolError(watchdog.expired, _limit_message(watchdog.expired)
                                         ) from None
        finally:
            self._watchdog = None
            await watchdog.stop()

    async def _dispatch(self, raw: str | bytes, transport: BrowserTransport) -> None:
        """One client message (the Realtime session decodes its own events here)."""
        message = protocol.decode_client(raw)
        if isinstance(message, protocol.AudioIn):
            self._watchdog.heard(pcm_seconds(len(message.pcm), protocol.INPUT_SAMPLE_RATE))
        await self._handle(message, transport)

    @staticmethod
    async def _cancel(task: asyncio.Task) -> None:
        task.cancel()

    async def run(self) -> None:
        state = self.state
        await self.ws.accept()
        self.message_rate = limit_socket(self.ws, state.config)
        refusal = self._refusal()
        if refusal is not None:
            await self.fail(refusal)
            return
        state.active_sessions.add(self.session_id)
        state.metrics.session_opened()
        call = None
        connected_t = time.monotonic()
        try:
            # 1. optional session.start
            stop_secs = state.config.stop_secs
            warnings = list(state.warnings)
            pending: list[protocol.ClientMessage] = []
            overrides: dict = {}
            # session.start counts whenever it is the first message (a loaded server or a
            # proxy may deliver it late); audio or ping first means defaults
            first = await self._next(connected_t + state.config.handshake_timeout_s,
                                     "handshake_timeout")
            if first is None:
                return
            message = protocol.decode_client(first)  # an empty text frame is bad_json
            if isinstance(message, protocol.SessionStart):
                stop_secs = message.config.get("stop_secs", stop_secs)
                overrides = message.config
                warnings += protocol.session_config_warnings(message)
            else:
                pending.append(message)

            # 2. the call (this socket is not read meanwhile: what a real-time caller sends
            # waits; the ingest limit, made now, takes it when reading starts)
            self.ingest = IngestLimit.from_config(state.config)
            transport = BrowserTransport(
                self.send_audio,
                input_sample_rate=protocol.INPUT_SAMPLE_RATE,
                output_sample_rate=state.tts.sample_rate,
            )
            call = start_call(
                state,
                transport,
                session_id=self.session_id,
                on_event=self.send_event,
                stop_secs=stop_secs,
                audio_in_sample_rate=protocol.INPUT_SAMPLE_RATE,
                audio_out_sample_rate=state.tts.sample_rate,
                eager_drafts=overrides.get("eager_drafts"),
                turn_window_secs=overrides.get("turn_window_secs"),
            )

            def _output_stalled() -> None:
                # pipecat's output transport gave up on a write (over its timeout, e.g. after
                # an event-loop stall) and writes nothing from now on: end the call, with why
                logger.warning(f"session {self.session_id}: audio output stalled, closing")
                if self._watchdog is not None:
                    self._watchdog.fire(OUTPUT_STALLED)

            transport.output().on_output_stalled = _output_stalled
            if not await call.started(PIPELINE_READY_SECS):
                raise protocol.ProtocolError("internal", "voice pipeline failed to start")
            await self.send_event(
                protocol.SessionStarted(
                    session_id=self.session_id,
                    input_sample_rate=protocol.INPUT_SAMPLE_RATE,
                    output_sample_rate=state.tts.sample_rate,
                    stop_secs=stop_secs,
                    model=state.model_name,
                    asr=state.asr.name,
                    tts=state.tts.name,
                    warnings=warnings,
                    replica=state.replica_id,
                )
            )

            # 3. receive loop, under the idle / duration limits
            for message in pending:
                await self._handle(message, transport)
            await self._receive_all(transport, call.done, connected_t)
        except protocol.ProtocolError as e:
            await self.fail(e)
        except Exception as e:
            logger.exception(f"session {self.session_id}: internal error")
            await self.fail(protocol.ProtocolError("internal", f"{type(e).__name__}: {e}"))
        finally:
            self._open = False
            if call is not None:
                await call.close("session closed")
            state.active_sessions.discard(self.session_id)
            state.client_slots.release(self.client_ip)
            state.metrics.session_closed()
            if getattr(state.config, "malloc_arena_max", 0):
                malloc_tune.trim_soon()  # the call's native buffers back to the OS
            await self.close(protocol.CLOSE_NORMAL, "bye")

    async def _handle(self, message: protocol.ClientMessage, transport: BrowserTransport) -> None:
        if isinstance(message, protocol.AudioIn):
            verdict = self.ingest.admit(pcm_seconds(len(message.pcm), protocol.INPUT_SAMPLE_RATE))
            if verdict == CLOSE:
                raise protocol.ProtocolError(
                    "audio_too_fast", f"caller audio faster than {self.ingest.rate:g}x real time "
                    f"(+{self.ingest.burst_s:g} s): {self.ingest.refused_s:.1f} s refused")
            if verdict == DROP:
                return  # over the rate: refused, never queued
            await transport.input().push_pcm(message.pcm)
        elif isinstance(message, protocol.Ping):
            await self.send_event(protocol.Pong())
        elif isinstance(message, protocol.SessionStart):
            raise protocol.ProtocolError(
                "late_session_start", "session.start is only allowed as the first message"
            )


async def serve_browser_session(websocket: WebSocket, state) -> None:
    await BrowserSession(websocket, state).run()
