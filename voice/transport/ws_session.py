"""One browser call over one WebSocket: protocol handshake, receive loop, pipeline lifetime.

Contract (`serve_browser_session(websocket, state)`, called by the `/ws` route):
1. accept; refuse with error "overloaded" (close 1013) past `config.max_sessions`;
2. wait up to FIRST_MESSAGE_SECS for an optional `session.start` (its overrides apply);
3. build the pipeline (voice.pipeline.build_pipeline) with a BrowserTransport, run it, send
   `session.started`;
4. decode every client message with voice.transport.protocol: audio goes into the pipeline,
   `ping` gets `pong`; any ProtocolError sends an `error` event and closes *this* socket with the
   error's
   close code (reason = error code) — other sessions never notice;
5. on any exit (client gone, protocol error, server shutdown) cancel the pipeline, which aborts
   this session's engine request, and report the session closed to the metrics.

All socket writes go through one lock so audio and JSON events keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid

from fastapi import WebSocket
from loguru import logger
from pipecat.workers.runner import WorkerRunner
from starlette.websockets import WebSocketDisconnect, WebSocketState

from voice.pipeline import build_pipeline
from voice.transport import protocol
from voice.transport.browser import BrowserTransport

FIRST_MESSAGE_SECS = 0.5
PIPELINE_READY_SECS = 30.0
SHUTDOWN_SECS = 5.0


class BrowserSession:
    def __init__(self, websocket: WebSocket, state) -> None:
        self.ws = websocket
        self.state = state
        self.session_id = uuid.uuid4().hex[:12]
        self._send_lock = asyncio.Lock()
        self._open = True

    # ------------------------------------------------------------------ sending

    async def _send(self, data: str | bytes) -> bool:
        async with self._send_lock:
            if not self._open or self.ws.application_state != WebSocketState.CONNECTED:
                return False
            try:
                if isinstance(data, bytes):
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_text(data)
                return True
            except Exception as e:  # the peer went away mid-write
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
        if message.get("bytes") is not None:
            return message["bytes"]
        if message.get("text") is not None:
            return message["text"]
        return None

    async def run(self) -> None:
        state = self.state
        await self.ws.accept()
        if len(state.active_sessions) >= state.config.max_sessions:
            await self.fail(protocol.ProtocolError("overloaded", "too many sessions, try later"))
            return
        state.active_sessions.add(self.session_id)
        state.metrics.session_opened()
        worker = runner_task = tracker = None
        try:
            # 1. optional session.start
            stop_secs = state.config.stop_secs
            warnings = list(state.warnings)
            pending: list[protocol.ClientMessage] = []
            try:
                first = await asyncio.wait_for(self._receive(), FIRST_MESSAGE_SECS)
            except TimeoutError:
                first = ""
            if first is None:
                return
            if first != "":
                message = protocol.decode_client(first)
                if isinstance(message, protocol.SessionStart):
                    stop_secs = message.config.get("stop_secs", stop_secs)
                    warnings += protocol.session_config_warnings(message)
                else:
                    pending.append(message)

            # 2. pipeline
            transport = BrowserTransport(
                self.send_audio,
                input_sample_rate=protocol.INPUT_SAMPLE_RATE,
                output_sample_rate=state.tts.sample_rate,
            )
            _, worker = build_pipeline(
                state,
                transport,
                session_id=self.session_id,
                on_event=self.send_event,
                stop_secs=stop_secs,
                audio_in_sample_rate=protocol.INPUT_SAMPLE_RATE,
                audio_out_sample_rate=state.tts.sample_rate,
            )
            tracker = worker.diffvoice_tracker
            runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
            await runner.add_workers(worker)
            runner_task = asyncio.create_task(runner.run(), name=f"session-{self.session_id}")
            ready = asyncio.create_task(transport.input().ready.wait())
            done, _ = await asyncio.wait(
                {ready, runner_task}, timeout=PIPELINE_READY_SECS, return_when="FIRST_COMPLETED"
            )
            if ready not in done:
                ready.cancel()
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

            # 3. receive loop
            for message in pending:
                await self._handle(message, transport)
            while True:
                raw = await self._receive()
                if raw is None or runner_task.done():
                    break
                await self._handle(protocol.decode_client(raw), transport)
        except protocol.ProtocolError as e:
            await self.fail(e)
        except Exception as e:
            logger.exception(f"session {self.session_id}: internal error")
            await self.fail(protocol.ProtocolError("internal", f"{type(e).__name__}: {e}"))
        finally:
            self._open = False
            if worker is not None:
                with contextlib.suppress(Exception):
                    await worker.cancel(reason="session closed")
            if runner_task is not None:
                try:
                    await asyncio.wait_for(runner_task, SHUTDOWN_SECS)
                except (TimeoutError, asyncio.CancelledError, Exception) as e:
                    logger.warning(f"session {self.session_id}: pipeline shutdown: {e!r}")
                    runner_task.cancel()
            if tracker is not None:
                with contextlib.suppress(Exception):
                    await tracker.close()
            state.active_sessions.discard(self.session_id)
            state.metrics.session_closed()
            await self.close(protocol.CLOSE_NORMAL, "bye")

    async def _handle(self, message: protocol.ClientMessage, transport: BrowserTransport) -> None:
        if isinstance(message, protocol.AudioIn):
            await transport.input().push_pcm(message.pcm)
        elif isinstance(message, protocol.Ping):
            await self.send_event(protocol.Pong())
        elif isinstance(message, protocol.SessionStart):
            raise protocol.ProtocolError(
                "late_session_start", "session.start is only allowed as the first message"
            )


async def serve_browser_session(websocket: WebSocket, state) -> None:
    await BrowserSession(websocket, state).run()
