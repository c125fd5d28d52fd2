"""One OpenAI-Realtime session over one WebSocket (`/v1/realtime?model=`): the GA event protocol
(`openai.types.realtime`) as a thin adapter over one call (voice.call.start_call).

The socket side is /ws's (voice.transport.ws_session.BrowserSession, which this subclasses):
the same Origin rules, API keys (`Authorization: Bearer`, `?api_key=`, a /session-token, or the
SDK's `openai-insecure-api-key.<key>` subprotocol), admission (max_sessions, the per-IP cap,
the browser lines' share), message rate, idle / duration limits and caller-audio ingest limit,
and every socket write under one lock. The call is the one every transport has: VAD, ASR, turn
end, the agent's serve(), TTS, barge-in, the latency record of each turn (logged and observed
as /ws's).

What this module adds is the event mapping (docs/realtime.md lists what is and is not
supported):
* `input_audio_buffer.append` -> the format's PCM, resampled to 16 kHz, into the call;
  `commit` / `clear`; the call's VAD gives `speech_started` / `speech_stopped`, each spoken
  segment a user item (`committed`, `conversation.item.added` / `done`), its transcript
  `conversation.item.input_audio_transcription.delta` / `completed`.
* responses: `ResponseGate` (between the user aggregator and the LLM) lets a turn's context
  through when the session wants a response: automatically with turn detection's
  create_response, else on `response.create` (a pushed LLMRunFrame). Each response reports
  `response.created`, its output items and content parts, `response.output_text.*` (text
  modality) or `response.output_audio.*` + `response.output_audio_transcript.*` (audio: the
  call's TTS, paced as /ws's), and `response.done` with status and usage.
* client tools: the model calls them through the engine's constrained tool calls (arguments
  always schema-valid); the call becomes a `function_call` item and the response ends; the
  client's `function_call_output` item settles it, and its next `response.create` speaks the
  outcome. The receptionist's own tools (for the embedded model) run in the server as on /ws.
* `response.cancel` and barge-in (turn detection's interrupt_response): the call's
  interruption (engine request aborted, audio stopped at the next frame), the response
  `cancelled`, its assistant item cut to what was sent.
* every client mistake is an `error` event in the SDK's shape, naming the client's event_id;
  only the socket-level limits close the socket (with the error event first).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    FunctionCallsStartedFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMConfigureOutputFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMMessagesAppendFrame,
    LLMMessagesUpdateFrame,
    LLMRunFrame,
    LLMTextFrame,
    MetricsFrame,
    TranscriptionFrame,
    TTSSpeakFrame,
    TTSTextFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.metrics.metrics import LLMUsageMetricsData
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallResultProperties

from diffvoice.voice import malloc_tune
from diffvoice.voice.call import start_call
from diffvoice.voice.ingest_limit import CLOSE, DROP, IngestLimit, pcm_seconds
from diffvoice.voice.json_input import JSONInputError, loads_untrusted
from diffvoice.voice.realtime import config as rc
from diffvoice.voice.realtime.audio import Decoder, Encoder
from diffvoice.voice.transport import protocol
from diffvoice.voice.transport.browser import BrowserTransport
from diffvoice.voice.transport.message_rate import limit_socket
from diffvoice.voice.transport.ws_session import (
    OUTPUT_STALLED,
    PIPELINE_READY_SECS,
    BrowserSession,
)

PIPELINE_RATE = 16000  # what the call's VAD and ASR hear
OUTPUT_RATE = 24000  # audio/pcm's rate (the call's output runs at the TTS's own rate)
MAX_EVENT_CHARS = 256 * 1024  # one client event; longer is refused before it is parsed
MAX_APPEND_SECS = 2.0  # audio in one input_audio_buffer.append
MAX_ITEMS = 1024  # conversation items kept for retrieve / truncate / delete
TRANSCRIPT_WAIT_SECS = 3.0  # response.create waits this long for committed speech's words
CLIENT_EVENTS = (
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
    "input_audio_buffer.clear", "conversation.item.create", "conversation.item.delete",
    "conversation.item.retrieve", "conversation.item.truncate", "response.create",
    "response.cancel", "output_audio_buffer.clear",
)  # fmt: skip
_ids = itertools.count(1)


def _id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


@dataclass
class Response:
    id: str
    options: rc.ResponseOptions
    status: str = "in_progress"
    reason: str | None = None  # status_details.reason
    output: list[dict] = field(default_factory=list)  # items, in order
    message: dict | None = None  # the assistant message item, once it has content
    text: str = ""  # what the model said (transcript / text)
    audio_ms: float = 0.0  # audio sent
    spoken: str = ""  # the TTS's words as their audio was written (pipecat's TTSTextFrame)
    text_at_ms: list[tuple[float, int]] = field(default_factory=list)  # (audio ms, len(spoken))
    llm_done: bool = False
    server_tool: bool = False  # a server tool ran: its re-prompt continues this response
    cut_ms: int | None = None  # its message truncated while it was still being said
    usage: dict = field(default_factory=lambda: {"input": 0, "output": 0})

    @property
    def audio(self) -> bool:
        return "audio" in self.options.modalities


class ResponseGate(FrameProcessor):
    """Between the user aggregator and the LLM: a turn's context goes on to the LLM only when
    the session starts a response for it; the session's interruptions pass, others only with
    interrupt_response."""

    def __init__(self, session: RealtimeSession) -> None:
        super().__init__(name="realtime-gate", enable_direct_mode=True)
        self._session = session
        self.own_interruption = False

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, LLMContextFrame):
                response = await self._session.response_for_turn()
                if response is None:
                    return  # no response wanted: the context keeps the turn
                await self.push_frame(LLMConfigureOutputFrame(skip_tts=not response.audio))
            elif isinstance(frame, InterruptionFrame):
                own, self.own_interruption = self.own_interruption, False
                if not own and not self._session.interrupts():
                    return  # interrupt_response false: the answer plays on
        await self.push_frame(frame, direction)

    async def interrupt(self) -> None:
        self.own_interruption = True
        await self.broadcast_interruption()


class RealtimeSession(BrowserSession):
    def __init__(self, websocket, state, model: str | None) -> None:
        super().__init__(websocket, state)
        self.session_id = _id("sess")
        self.requested_model = model
        self.cfg: rc.SessionConfig | None = None
        self.call = None
        self.gate = ResponseGate(self)
        self.items: dict[str, dict] = {}  # conversation items by id, in order
        self.response: Response | None = None
        self._requested: list[Response] = []  # response.create waiting for its context frame
        self._pending_calls: dict[str, asyncio.Future] = {}  # call_id -> the client's output
        self._client_tool_names: set[str] = set()
        self._buffer_ms = 0.0  # appended since the last commit / clear / speech segment
        self._heard_ms = 0.0  # appended in all
        self._speech_item: str | None = None  # the user item of the segment being spoken
        self._untranscribed: list[str] = []  # user items waiting for their transcript
        self._heard_words: list[str] = []  # turn detection off: words before the commit
        self._decoder: Decoder | None = None
        self._encoder: Encoder | None = None
        self._out_rate = OUTPUT_RATE  # the call's output rate (the TTS's), set in run()
        self._saved: tuple | None = None  # the LLM's settings a response overrode
        self._idle_task: asyncio.Task | None = None
        self._transcribed = asyncio.Event()  # no user item waits for its transcript
        self._transcribed.set()
        self.server_events = 0

    # ------------------------------------------------------------------ sending

    async def emit(self, event_type: str, **fields) -> None:
        self.server_events += 1
        event = {"type": event_type, "event_id": f"event_{next(_ids)}", **fields}
        await self._send(json.dumps(event, separators=(",", ":")))

    async def error(self, err: rc.RealtimeError, event_id: str | None = None) -> None:
        self.state.metrics.observe_error(f"realtime_{err.code}")
        await self.emit("error", error={"type": err.kind, "code": err.code,
                                        "message": err.message, "param": err.param,
                                        "event_id": event_id})

    async def fail(self, error: protocol.ProtocolError) -> None:
        """A socket-level limit (or a refusal): an error event, then close with its code."""
        logger.info(f"realtime {self.session_id}: closing, {error.code}: {error.message}")
        self.state.metrics.observe_error(error.code)
        await self.emit("error", error={"type": "invalid_request_error", "code": error.code,
                                        "message": error.message, "param": None,
                                        "event_id": None})
        await self.close(error.close_code, error.code)

    # ------------------------------------------------------------------ lifetime

    def _model(self) -> str:
        served = served_names(self.state)
        if self.requested_model in (None, ""):
            return served[0]
        if self.requested_model not in served:
            raise protocol.ProtocolError(
                "model_not_found", f"the model {self.requested_model[:100]!r} does not exist "
                f"here; this server serves {', '.join(served)}")
        return self.requested_model

    async def run(self) -> None:
        state = self.state
        offered = [p.strip() for p in self.ws.headers.get("sec-websocket-protocol", "").split(",")]
        await self.ws.accept(subprotocol="realtime" if "realtime" in offered else None)
        self.message_rate = limit_socket(self.ws, state.config)
        refusal = self._refusal()
        if refusal is None:
            try:
                model = self._model()
            except protocol.ProtocolError as e:
                self.state.client_slots.release(self.client_ip)
                refusal = e
        if refusal is not None:
            await self.fail(refusal)
            return
        state.active_sessions.add(self.session_id)
        state.metrics.session_opened()
        connected_t = time.monotonic()
        try:
            self.cfg = rc.SessionConfig.defaults(
                model=model, instructions=state.config.system_prompt,
                stop_secs=state.config.stop_secs)
            self.ingest = IngestLimit.from_config(state.config)
            self._decoder = Decoder(self.cfg.input_format, PIPELINE_RATE)
            self._out_rate = state.tts.sample_rate  # the TTS's own: resampled in the Encoder
            self._encoder = Encoder(self.cfg.output_format, self._out_rate)
            transport = BrowserTransport(self._send_audio, input_sample_rate=PIPELINE_RATE,
                                         output_sample_rate=self._out_rate)
            self._transport = transport
            self.call = start_call(
                state, transport, session_id=self.session_id, observe=self._observe,
                before_llm=[self.gate], audio_in_sample_rate=PIPELINE_RATE,
                audio_out_sample_rate=self._out_rate)

            def _output_stalled() -> None:
                if self._watchdog is not None:
                    self._watchdog.fire(OUTPUT_STALLED)

            transport.output().on_output_stalled = _output_stalled
            if not await self.call.started(PIPELINE_READY_SECS):
                raise protocol.ProtocolError("internal", "voice pipeline failed to start")
            self.call.llm.register_function(None, self._client_tool, cancel_on_interruption=True,
                                            timeout_secs=float(state.config.max_call_s))
            await self._apply_session(self.cfg)
            await self.emit("session.created", session=self.cfg.as_session(self.session_id))
            await self.emit("conversation.created", conversation={
                "id": _id("conv"), "object": "realtime.conversation"})
            await self._receive_all(transport, self.call.done, connected_t)
        except protocol.ProtocolError as e:
            await self.fail(e)
        except Exception as e:
            logger.exception(f"realtime {self.session_id}: internal error")
            await self.fail(protocol.ProtocolError("internal", f"{type(e).__name__}: {e}"))
        finally:
            self._open = False
            self._disarm_idle()
            for future in self._pending_calls.values():
                future.cancel()
            if self.call is not None:
                await self.call.close("session closed")
            state.active_sessions.discard(self.session_id)
            state.client_slots.release(self.client_ip)
            state.metrics.session_closed()
            if getattr(state.config, "malloc_arena_max", 0):
                malloc_tune.trim_soon()  # the call's native buffers back to the OS, as /ws does
            await self.close(protocol.CLOSE_NORMAL, "bye")

    async def _dispatch(self, raw: str | bytes, _transport) -> None:
        await self.handle_raw(raw)

    async def handle_raw(self, raw: str | bytes) -> None:
        if isinstance(raw, bytes):
            await self.error(rc.RealtimeError(
                "binary frames are not part of the Realtime protocol: send JSON events "
                "(audio as base64 in input_audio_buffer.append)", code="invalid_event"))
            return
        if len(raw) > MAX_EVENT_CHARS:
            await self.error(rc.RealtimeError(
                f"event of {len(raw)} characters is over this server's {MAX_EVENT_CHARS}",
                code="event_too_large"))
            return
        try:
            event = loads_untrusted(raw)
        except JSONInputError as e:
            await self.error(rc.RealtimeError(f"invalid JSON: {e}", code="invalid_json"))
            return
        event_id = event.get("event_id") if isinstance(event, dict) else None
        event_id = event_id if isinstance(event_id, str) and len(event_id) <= 128 else None
        try:
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise rc.RealtimeError("an event must be a JSON object with a string 'type'",
                                       param="type", code="invalid_event")
            kind = event["type"]
            handler = getattr(self, "_on_" + kind.replace(".", "_"), None)
            if kind not in CLIENT_EVENTS or handler is None:
                raise rc.RealtimeError(f"unknown event type {kind[:64]!r}", param="type",
                                       code="invalid_event")
            await handler(event)
        except rc.RealtimeError as e:
            await self.error(e, event_id)

    async def _on_session_update(self, event: dict) -> None:
        cfg = self.cfg.updated(event.get("session"))
        if cfg.tools != self.cfg.tools:
            await self._check_tools(cfg.tools, cfg.tool_choice)
        await self._apply_session(cfg)
        await self.emit("session.updated", session=cfg.as_session(self.session_id))

    async def _check_tools(self, tools, choice) -> None:
        """The tools' schemas, as the engine will compile them: counted and meta-checked off
        the event loop, on the API's threads (voice.openai_api.router.api_limits). A client
        tool may not take the name of one the server runs itself (the receptionist's)."""
        from diffvoice.engine.constrained.limits import check_request
        from diffvoice.voice.openai_api.router import api_limits

        receptionist = getattr(self.state, "receptionist", None)
        own = {t["function"]["name"] for t in receptionist.schemas} if receptionist else set()
        for i, tool in enumerate(tools):
            if tool["name"] in own:
                raise rc.RealtimeError(f"{tool['name']!r} is one of the server's own tools "
                                       "(the receptionist's); name yours differently",
                                       param=f"tools[{i}].name")

        _, pool = api_limits(self.state)
        try:
            await asyncio.get_running_loop().run_in_executor(
                pool, check_request, rc.chat_tools(tools), rc.engine_tool_choice(choice), None)
        except ValueError as e:
            raise rc.RealtimeError(f"tools: {str(e)[:300]}", param="session.tools") from None

    async def _apply_session(self, cfg: rc.SessionConfig) -> None:
        old, self.cfg = self.cfg, cfg
        llm, call = self.call.llm, self.call
        llm.system_prompt = cfg.instructions or None
        llm.client_tools = rc.chat_tools(cfg.tools)
        llm.client_tool_choice = rc.engine_tool_choice(cfg.tool_choice) if cfg.tools else None
        self._client_tool_names = {t["name"] for t in cfg.tools}
        if cfg.max_output_tokens != "inf":
            llm.max_new_tokens = min(cfg.max_output_tokens, self.state.config.max_new_tokens)
        else:
            llm.max_new_tokens = self.state.config.max_new_tokens
        if old is None or cfg.input_format != old.input_format:
            self._decoder = Decoder(cfg.input_format, PIPELINE_RATE)
        if old is None or cfg.output_format != old.output_format:
            self._encoder = Encoder(cfg.output_format, self._out_rate)
        td = cfg.turn_detection
        if td.type is not None and call.vad is not None:
            stop, window = td.stop_and_window(self.state.config.turn_window_secs)
            params = call.vad.params
            params.stop_secs = stop
            params.confidence = td.threshold if td.type == "server_vad" else params.confidence
            call.vad.set_params(params)
            if call.turn_end is not None:
                call.turn_end.stop_secs, call.turn_end.window_secs = stop, max(window, stop)
        if td.type != "server_vad" or not td.idle_timeout_ms:
            self._disarm_idle()

    def interrupts(self) -> bool:
        """Whether the caller's speech may cut the answer off (turn detection's
        interrupt_response; with none, only the client's response.cancel does)."""
        td = self.cfg.turn_detection if self.cfg is not None else None
        return td is not None and td.type is not None and td.interrupt_response

    # server_vad idle_timeout_ms: no speech that long after an answer -> a response anyway
    def _arm_idle(self) -> None:
        self._disarm_idle()
        td = self.cfg.turn_detection
        if td.type == "server_vad" and td.idle_timeout_ms and self._open:
            self._idle_task = asyncio.create_task(self._idle(td.idle_timeout_ms / 1000.0))

    def _disarm_idle(self) -> None:
        task, self._idle_task = self._idle_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    async def _idle(self, secs: float) -> None:
        await asyncio.sleep(secs)
        self._idle_task = None
        if self.response is not None or self._requested or self._speech_item is not None:
            return
        item_id = _id("item")
        await self.emit("input_audio_buffer.timeout_triggered",
                        audio_start_ms=max(0, round(self._heard_ms - secs * 1000.0)),
                        audio_end_ms=round(self._heard_ms), item_id=item_id)
        await self.emit("input_audio_buffer.committed", previous_item_id=self._previous(),
                        item_id=item_id)
        await self._add_item({"id": item_id, "type": "message", "object": "realtime.item",
                              "role": "user", "status": "completed",
                              "content": [{"type": "input_audio", "transcript": ""}]},
                             done=True)
        self._requested.append(Response(_id("resp"), rc.response_options(None, self.cfg)))
        await self.call.queue_frames([LLMRunFrame()])

    async def _on_input_audio_buffer_append(self, event: dict) -> None:
        audio = event.get("audio")
        limit = int(MAX_APPEND_SECS * self.cfg.input_format.bytes_per_second * 4 / 3) + 4
        if not isinstance(audio, str):
            raise rc.RealtimeError("audio must be a base64 string", param="audio")
        if len(audio) > limit:
            raise rc.RealtimeError(
                f"one append may carry at most {MAX_APPEND_SECS:g} s of audio ({limit} base64 "
                "characters in this format); send it in chunks", param="audio",
                code="audio_too_large")
        try:
            data = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise rc.RealtimeError("audio is not valid base64", param="audio") from None
        secs = len(data) / self.cfg.input_format.bytes_per_second
        verdict = self.ingest.admit(secs)
        if verdict == CLOSE:
            raise protocol.ProtocolError(
                "audio_too_fast", f"caller audio faster than {self.ingest.rate:g}x real time "
                f"(+{self.ingest.burst_s:g} s): {self.ingest.refused_s:.1f} s refused")
        if verdict == DROP:
            raise rc.RealtimeError(f"audio faster than {self.ingest.rate:g}x real time: this "
                                   "append was refused", param="audio", code="audio_too_fast")
        pcm = await self._decoder.pcm(data)
        self._buffer_ms += secs * 1000.0
        self._heard_ms += secs * 1000.0
        if self._watchdog is not None:
            self._watchdog.heard(pcm_seconds(len(pcm), PIPELINE_RATE))
        await self._transport.input().push_pcm(pcm)

    async def _on_input_audio_buffer_commit(self, _event: dict) -> None:
        if self._buffer_ms < 100.0:
            raise rc.RealtimeError(
                f"buffer too small: {self._buffer_ms:.0f} ms of audio since the last commit, "
                "at least 100 ms needed", code="input_audio_buffer_commit_empty")
        self._buffer_ms = 0.0
        if self.cfg.turn_detection.type is not None:
            if self._speech_item is None:  # else its item comes when its speech stops
                item_id = await self._user_audio_item()  # no speech the VAD heard: no words
                await self._transcript(item_id, "")
            return
        item_id = await self._user_audio_item()  # turn detection off: the client's turn
        if self._heard_words:  # the VAD-segmented speech already transcribed
            words, self._heard_words = " ".join(self._heard_words), []
            self._untranscribed.remove(item_id)
            await self._transcript(item_id, words)

    async def _on_input_audio_buffer_clear(self, _event: dict) -> None:
        self._buffer_ms = 0.0
        self._heard_words = []
        await self.emit("input_audio_buffer.cleared")

    async def _on_output_audio_buffer_clear(self, _event: dict) -> None:
        raise rc.RealtimeError("output_audio_buffer.clear is for WebRTC and SIP connections; "
                               "over a WebSocket use response.cancel and "
                               "conversation.item.truncate", code="unsupported")

    # ------------------------------------------------------------------ conversation

    def _previous(self) -> str | None:
        return next(reversed(self.items), None)

    async def _add_item(self, item: dict, *, response: Response | None = None,
                        done: bool = False) -> None:
        previous = self._previous()
        if len(self.items) >= MAX_ITEMS:
            self.items.pop(next(iter(self.items)))
        self.items[item["id"]] = item
        if response is not None:
            response.output.append(item)
            await self.emit("response.output_item.added", response_id=response.id,
                            output_index=len(response.output) - 1, item=item)
        await self.emit("conversation.item.added", previous_item_id=previous, item=item)
        if done:
            await self.emit("conversation.item.done", previous_item_id=previous, item=item)

    async def _user_audio_item(self, item_id: str | None = None) -> str:
        """Commit a user audio item (a new id unless the VAD's segment named one), awaiting
        its transcript."""
        item_id = item_id or _id("item")
        previous = self._previous()
        await self.emit("input_audio_buffer.committed", previous_item_id=previous,
                        item_id=item_id)
        item = {"id": item_id, "type": "message", "object": "realtime.item", "role": "user",
                "status": "completed", "content": [{"type": "input_audio", "transcript": None}]}
        await self._add_item(item, done=True)
        self._untranscribed.append(item_id)
        self._transcribed.clear()
        return item_id

    async def _on_conversation_item_create(self, event: dict) -> None:
        item = event.get("item")
        previous = event.get("previous_item_id")
        if previous not in (None, self._previous()):
            raise rc.RealtimeError("items can only be added at the end of the conversation "
                                   "(previous_item_id must be the last item or null)",
                                   param="previous_item_id", code="unsupported")
        if not isinstance(item, dict):
            raise rc.RealtimeError("item must be an object", param="item")
        kind = item.get("type")
        item_id = item.get("id") if isinstance(item.get("id"), str) else _id("item")
        if len(item_id) > 64 or item_id in self.items:
            raise rc.RealtimeError("item id must be new and at most 64 characters",
                                   param="item.id")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system"):
                raise rc.RealtimeError("role must be user, assistant or system",
                                       param="item.role")
            text = _message_text(item.get("content"), role)
            out = {"id": item_id, "type": "message", "object": "realtime.item", "role": role,
                   "status": "completed", "content": [
                       {"type": "output_text" if role == "assistant" else "input_text",
                        "text": text}]}
            await self.call.queue_frames([LLMMessagesAppendFrame(
                messages=[{"role": role, "content": text}], run_llm=False)])
        elif kind == "function_call_output":
            call_id, output = item.get("call_id"), item.get("output")
            if not isinstance(call_id, str) or not isinstance(output, str):
                raise rc.RealtimeError("function_call_output needs string call_id and output",
                                       param="item")
            future = self._pending_calls.pop(call_id, None)
            if future is None or future.done():
                raise rc.RealtimeError(f"no function call {call_id[:64]!r} is waiting for its "
                                       "output", param="item.call_id")
            future.set_result(output)
            out = {"id": item_id, "type": "function_call_output", "object": "realtime.item",
                   "call_id": call_id, "output": output, "status": "completed"}
        elif kind == "function_call":
            raise rc.RealtimeError("function_call items are made by the model; send the "
                                   "call's result as a function_call_output item",
                                   param="item.type", code="unsupported")
        else:
            raise rc.RealtimeError(f"item type {str(kind)[:40]!r} is not supported (message "
                                   "or function_call_output)", param="item.type",
                                   code="unsupported")
        await self._add_item(out, done=True)

    async def _on_conversation_item_retrieve(self, event: dict) -> None:
        item = self._item(event)
        await self.emit("conversation.item.retrieved", item=item)

    def _item(self, event: dict) -> dict:
        item_id = event.get("item_id")
        item = self.items.get(item_id) if isinstance(item_id, str) else None
        if item is None:
            raise rc.RealtimeError(f"no item {str(item_id)[:64]!r} in the conversation",
                                   param="item_id", code="item_not_found")
        return item

    async def _on_conversation_item_delete(self, event: dict) -> None:
        item = self._item(event)
        if self.response is not None and item in self.response.output:
            raise rc.RealtimeError("an item of the response in progress cannot be deleted",
                                   param="item_id")
        del self.items[item["id"]]
        await self._rewrite_context(item, None)
        await self.emit("conversation.item.deleted", item_id=item["id"])

    async def _on_conversation_item_truncate(self, event: dict) -> None:
        item = self._item(event)
        end_ms = event.get("audio_end_ms")
        if item.get("role") != "assistant" or item.get("type") != "message" or not any(
                part.get("type") == "output_audio" for part in item["content"]):
            raise rc.RealtimeError("only an assistant message with audio can be truncated",
                                   param="item_id")
        if event.get("content_index", 0) != 0:
            raise rc.RealtimeError("content_index must be 0", param="content_index")
        live = self.response if self.response is not None and (
            item is self.response.message) and self.response.cut_ms is None else None
        # a barge-in's truncate (pipecat sends it on speech_started) can come before the call's
        # interruption has finished the response: the item's audio is what was sent so far
        sent = live.audio_ms if live is not None else item.get("_audio_ms", 0.0)
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or not 0 <= end_ms <= sent:
            raise rc.RealtimeError(f"audio_end_ms must be an integer from 0 to the item's "
                                   f"{sent:.0f} ms of audio", param="audio_end_ms")
        part = item["content"][0]
        item["_audio_ms"] = float(end_ms)
        if live is not None:
            # the context gets the answer from the call's own output when it ends (what was
            # spoken up to the interruption), so only the item is cut here
            part["transcript"] = _text_heard(live.text, live.spoken, live.text_at_ms, end_ms,
                                             sent)
            live.cut_ms = end_ms  # _finish keeps the cut
        else:
            old_text = part.get("transcript") or ""
            part["transcript"] = _text_heard(old_text, item.get("_spoken", ""),
                                             item.get("_text_at_ms", []), end_ms, sent)
            await self._rewrite_context(item, part["transcript"], old_text)
        await self.emit("conversation.item.truncated", item_id=item["id"], content_index=0,
                        audio_end_ms=end_ms)

    async def _rewrite_context(self, item: dict, text: str | None, old: str | None = None
                               ) -> None:
        """The call's context without (text None) or with a shorter copy of the item's message:
        matched by role and text, the latest first."""
        messages = list(self.call.context.get_messages())
        role = item.get("role")
        if old is None:
            old = _item_text(item)
        for i in range(len(messages) - 1, -1, -1):
            m = messages[i]
            if m.get("role") == role and isinstance(m.get("content"), str) and (
                    m["content"].strip() == (old or "").strip()):
                if text is None:
                    del messages[i]
                else:
                    messages[i] = {**m, "content": text}
                await self.call.queue_frames([LLMMessagesUpdateFrame(messages=messages,
                                                                     run_llm=False)])
                return

    # ------------------------------------------------------------------ responses

    async def _on_response_create(self, event: dict) -> None:
        if self.response is not None or self._requested:
            raise rc.RealtimeError("the conversation already has an active response",
                                   code="conversation_already_has_active_response")
        options = rc.response_options(event.get("response"), self.cfg)
        if options.tools != self.cfg.tools:
            await self._check_tools(options.tools, options.tool_choice)
        if not self._transcribed.is_set():  # committed speech still being transcribed: the
            # answer is to it (bounded: speech the VAD never segmented gets no transcript)
            try:
                await asyncio.wait_for(self._transcribed.wait(), TRANSCRIPT_WAIT_SECS)
            except TimeoutError:
                self._untranscribed.clear()
                self._transcribed.set()
        response = Response(_id("resp"), options)
        self._requested.append(response)
        self._disarm_idle()
        await self.call.queue_frames([LLMRunFrame()])

    async def _on_response_cancel(self, event: dict) -> None:
        response = self.response or (self._requested[0] if self._requested else None)
        wanted = event.get("response_id")
        if response is None or (wanted is not None and wanted != response.id):
            raise rc.RealtimeError("there is no response in progress to cancel"
                                   if response is None else f"response {str(wanted)[:64]!r} "
                                   "is not in progress", code="response_cancel_not_active")
        if response in self._requested:
            self._requested.remove(response)
            await self._start_response(response)
        await self._finish(response, "cancelled", "client_cancelled")
        await self.gate.interrupt()

    async def response_for_turn(self) -> Response | None:
        """Called by the gate for each turn context: the response it starts, or None."""
        if self._requested:
            response = self._requested.pop(0)
        else:
            td = self.cfg.turn_detection
            if td.type is None or not td.create_response or self.response is not None:
                return None
            response = Response(_id("resp"), rc.response_options(None, self.cfg))
        await self._start_response(response)
        return response

    async def _start_response(self, response: Response) -> None:
        self.response = response
        llm, options = self.call.llm, response.options
        self._saved = (llm.system_prompt, llm.client_tools, llm.client_tool_choice,
                       llm.max_new_tokens, self._client_tool_names)
        llm.system_prompt = options.instructions or None
        llm.client_tools = rc.chat_tools(options.tools)
        llm.client_tool_choice = (rc.engine_tool_choice(options.tool_choice) if options.tools
                                  else None)
        self._client_tool_names = {t["name"] for t in options.tools}
        if options.max_output_tokens != "inf":
            llm.max_new_tokens = min(options.max_output_tokens, self.state.config.max_new_tokens)
        await self.emit("response.created", response=self._response_obj(response))

    def _response_obj(self, response: Response) -> dict:
        obj = {"id": response.id, "object": "realtime.response", "status": response.status,
               "status_details": None, "output": [_public(i) for i in response.output],
               "output_modalities": list(response.options.modalities),
               "max_output_tokens": response.options.max_output_tokens,
               "conversation_id": None, "metadata": response.options.metadata,
               "audio": {"output": {"format": self.cfg.output_format.as_dict(),
                                    "voice": self.cfg.voice}},
               "usage": None}
        if response.status != "in_progress":
            obj["status_details"] = {"type": response.status, "reason": response.reason}
            inp, out = response.usage["input"], response.usage["output"]
            obj["usage"] = {"total_tokens": inp + out, "input_tokens": inp, "output_tokens": out,
                            "input_token_details": {"text_tokens": inp, "audio_tokens": 0,
                                                    "cached_tokens": 0},
                            "output_token_details": {"text_tokens": out, "audio_tokens": 0}}
        return obj

    async def _message(self, response: Response) -> dict:
        """The response's assistant message item (made at its first text)."""
        if response.message is None:
            kind = "output_audio" if response.audio else "output_text"
            item = {"id": _id("item"), "type": "message", "object": "realtime.item",
                    "role": "assistant", "status": "in_progress", "content": []}
            response.message = item
            await self._add_item(item, response=response)
            part = {"type": kind, "transcript": ""} if response.audio else {"type": kind,
                                                                           "text": ""}
            item["content"].append(part)
            await self.emit("response.content_part.added", **self._where(response),
                            part={"type": "audio" if response.audio else "text",
                                  **({"transcript": ""} if response.audio else {"text": ""})})
        return response.message

    def _where(self, response: Response) -> dict:
        return {"response_id": response.id, "item_id": response.message["id"],
                "output_index": response.output.index(response.message), "content_index": 0}

    async def _text(self, response: Response, text: str) -> None:
        await self._message(response)
        response.text += text
        kind = ("response.output_audio_transcript.delta" if response.audio
                else "response.output_text.delta")
        await self.emit(kind, **self._where(response), delta=text)

    async def _finish(self, response: Response, status: str, reason: str | None = None) -> None:
        if response.status != "in_progress":
            return
        response.status, response.reason = status, reason
        if self.response is response:
            self.response = None
        if self._saved is not None:
            llm = self.call.llm
            (llm.system_prompt, llm.client_tools, llm.client_tool_choice, llm.max_new_tokens,
             self._client_tool_names) = self._saved
            self._saved = None
        item = response.message
        if item is not None:
            where = self._where(response)
            item["status"] = "completed" if status == "completed" else "incomplete"
            part = item["content"][0]
            if response.audio:
                if response.cut_ms is None:  # else the truncate's transcript and audio stand
                    part["transcript"] = response.text
                    item["_audio_ms"] = response.audio_ms
                item["_text_at_ms"] = response.text_at_ms
                item["_spoken"] = response.spoken
                await self.emit("response.output_audio.done", **where)
                await self.emit("response.output_audio_transcript.done", **where,
                                transcript=response.text)
                await self.emit("response.content_part.done", **where,
                                part={"type": "audio", "transcript": response.text})
            else:
                part["text"] = response.text
                await self.emit("response.output_text.done", **where, text=response.text)
                await self.emit("response.content_part.done", **where,
                                part={"type": "text", "text": response.text})
            await self.emit("response.output_item.done", response_id=response.id,
                            output_index=where["output_index"], item=_public(item))
            await self.emit("conversation.item.done", item=_public(item))
        await self.emit("response.done", response=self._response_obj(response))
        if status == "completed":
            self._arm_idle()
        limit = response.options.max_output_tokens
        limit = self.state.config.max_new_tokens if limit == "inf" else limit
        await self.emit("rate_limits.updated", rate_limits=[{
            "name": "tokens", "limit": limit,
            "remaining": max(0, limit - response.usage["output"]), "reset_seconds": 0.0}])

    async def _client_tool(self, params) -> None:
        """Catch-all handler: a client tool's call waits for the client's output."""
        future = self._pending_calls.get(params.tool_call_id)
        if future is None:  # not a client tool (or the session closed): nothing to run
            await params.result_callback(
                {"error": f"no tool named {params.function_name}"},
                properties=FunctionCallResultProperties(run_llm=False))
            return
        output = await future
        await params.result_callback(output, properties=FunctionCallResultProperties(
            run_llm=False))

    async def _function_call(self, response: Response, frame) -> None:
        """A client tool's call (pipecat's FunctionCallFromLLM) as a function_call item."""
        arguments = json.dumps(frame.arguments, separators=(",", ":"))
        item = {"id": _id("item"), "type": "function_call", "object": "realtime.item",
                "status": "completed", "name": frame.function_name,
                "call_id": frame.tool_call_id, "arguments": arguments}
        self._pending_calls[frame.tool_call_id] = asyncio.get_running_loop().create_future()
        await self._add_item({**item, "status": "in_progress", "arguments": ""},
                             response=response)
        where = {"response_id": response.id, "item_id": item["id"],
                 "output_index": len(response.output) - 1, "call_id": frame.tool_call_id}
        await self.emit("response.function_call_arguments.delta", **where, delta=arguments)
        await self.emit("response.function_call_arguments.done", **where, name=item["name"],
                        arguments=arguments)
        response.output[-1] = item
        self.items[item["id"]] = item
        await self.emit("response.output_item.done", response_id=response.id,
                        output_index=where["output_index"], item=item)
        await self.emit("conversation.item.done", item=item)

    # ------------------------------------------------------------------ the call's frames

    async def _observe(self, where: str, frame, direction) -> None:
        if where == "stt":
            await self._on_stt(frame)
        elif where == "llm" and direction == FrameDirection.DOWNSTREAM:
            await self._on_llm(frame)
        elif where == "out" and direction == FrameDirection.DOWNSTREAM:
            await self._on_out(frame)

    async def _on_stt(self, frame) -> None:
        td = self.cfg.turn_detection
        if isinstance(frame, VADUserStartedSpeakingFrame):
            if td.type is not None and self._speech_item is None:
                self._disarm_idle()
                self._speech_item = _id("item")
                await self.emit("input_audio_buffer.speech_started",
                                audio_start_ms=max(0, round(self._heard_ms - (
                                    getattr(frame, "start_secs", 0) or 0) * 1000)),
                                item_id=self._speech_item)
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            if self._speech_item is not None:
                item_id, self._speech_item = self._speech_item, None
                await self.emit("input_audio_buffer.speech_stopped",
                                audio_end_ms=round(self._heard_ms), item_id=item_id)
                self._buffer_ms = 0.0
                await self._user_audio_item(item_id)
        elif isinstance(frame, TranscriptionFrame):
            text = frame.text.strip()
            if text:
                if not self._untranscribed and td.type is None:
                    self._heard_words.append(text)  # the client's next commit takes it
                    return
                if not self._untranscribed:  # heard without a segment of its own: a new item
                    await self._user_audio_item()
                await self._transcript(self._untranscribed[0], text)
        elif isinstance(frame, InterimTranscriptionFrame):
            pass  # the final transcript is sent whole (deltas are not revisable)

    async def _transcript(self, item_id: str, text: str) -> None:
        """A user audio item's words (once, whole: the recogniser's final transcript)."""
        if item_id in self._untranscribed:
            self._untranscribed.remove(item_id)
        if not self._untranscribed:
            self._transcribed.set()
        item = self.items.get(item_id)
        if item is not None:
            item["content"][0]["transcript"] = text
        if text:
            await self.emit("conversation.item.input_audio_transcription.delta",
                            item_id=item_id, content_index=0, delta=text)
        await self.emit("conversation.item.input_audio_transcription.completed",
                        item_id=item_id, content_index=0, transcript=text,
                        usage={"type": "duration", "seconds": 0})

    async def _on_llm(self, frame) -> None:
        response = self.response
        if isinstance(frame, TTSSpeakFrame):  # the turn end's "say it again", without the LLM
            if response is None:
                response = Response(_id("resp"), rc.response_options(None, self.cfg))
                await self._start_response(response)
            await self._text(response, frame.text)
            response.llm_done = True
            if not response.audio:
                await self._finish(response, "completed")
            return
        if response is None:
            return
        if isinstance(frame, LLMFullResponseStartFrame):
            response.llm_done = False
        elif isinstance(frame, LLMTextFrame) and frame.text:
            await self._text(response, frame.text)
        elif isinstance(frame, FunctionCallsStartedFrame):
            for call in frame.function_calls:
                if call.function_name in self._client_tool_names:
                    await self._function_call(response, call)
                else:
                    response.server_tool = True  # its result re-prompts: the same response
        elif isinstance(frame, MetricsFrame):
            for data in frame.data:
                if isinstance(data, LLMUsageMetricsData):
                    response.usage["input"] += data.value.prompt_tokens
                    response.usage["output"] += data.value.completion_tokens
        elif isinstance(frame, LLMFullResponseEndFrame):
            response.llm_done = True
            if response.server_tool:
                response.server_tool = False
                return
            if not response.audio or not response.text.strip():
                await self._finish(response, "completed")

    async def _on_out(self, frame) -> None:
        response = self.response
        if isinstance(frame, InterruptionFrame):
            if response is not None:
                await self._finish(response, "cancelled", "turn_detected")
        elif isinstance(frame, TTSTextFrame) and response is not None and frame.text:
            sep = " " if response.spoken and not frame.text.startswith(" ") else ""
            response.spoken += sep + frame.text
            response.text_at_ms.append((response.audio_ms, len(response.spoken)))
        elif isinstance(frame, LLMFullResponseEndFrame) and response is not None:
            if response.llm_done and response.audio:
                await self._finish(response, "completed")  # all of its audio was written

    async def _send_audio(self, pcm: bytes) -> bool:
        response = self.response
        if response is None or not response.audio:
            return True  # nothing to say it in (cancelled, or a text response)
        await self._message(response)
        response.audio_ms += len(pcm) / 2 / self._out_rate * 1000.0
        data = await self._encoder.encode(pcm)
        if not data:
            return True
        await self.emit("response.output_audio.delta", **self._where(response),
                        delta=base64.b64encode(data).decode("ascii"))
        return self._open


def _message_text(content: Any, role: str) -> str:
    if not isinstance(content, list) or not content:
        raise rc.RealtimeError("content must be a non-empty array of parts",
                               param="item.content")
    texts = []
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in ("input_text", "text", "output_text") and isinstance(part.get("text"), str):
            texts.append(part["text"])
        elif kind in ("input_audio", "audio", "output_audio") and isinstance(
                part.get("transcript"), str):
            texts.append(part["transcript"])
        elif kind in ("input_audio", "audio"):
            raise rc.RealtimeError("audio content in conversation.item.create is not "
                                   "supported by this server: stream it with "
                                   "input_audio_buffer.append", param=f"item.content[{i}]",
                                   code="unsupported")
        elif kind == "input_image":
            raise rc.RealtimeError("image input is not supported by this server",
                                   param=f"item.content[{i}]", code="unsupported")
        else:
            raise rc.RealtimeError("each part must be input_text (or text with a string "
                                   "'text')", param=f"item.content[{i}]")
    return "\n".join(texts)


def _item_text(item: dict) -> str:
    part = (item.get("content") or [{}])[0]
    return part.get("text") or part.get("transcript") or ""


def _text_heard(text: str, spoken: str, text_at_ms: list[tuple[float, int]], end_ms: float,
                total_ms: float) -> str:
    """What of the transcript the listener heard in `end_ms` of audio: the TTS's words whose
    audio had been written by then (pipecat's TTSTextFrames, timed at the output), else the
    share of the text that end_ms is of the audio, cut back to a whole word."""
    if text_at_ms:
        keep = 0
        for audio_ms, length in text_at_ms:
            if audio_ms <= end_ms:
                keep = length
        return spoken[:keep].strip()
    if total_ms <= 0:
        return ""
    cut = round(len(text) * min(1.0, end_ms / total_ms))
    if cut < len(text) and " " in text[:cut]:
        cut = text[:cut].rstrip().rfind(" ") if not text[cut].isspace() else cut
    return text[:max(0, cut)].strip()


def _public(item: dict) -> dict:
    return {k: v for k, v in item.items() if not k.startswith("_")}


def served_names(state) -> tuple[str, ...]:
    from diffvoice.voice.openai_api.router import served_model_names

    return served_model_names(state) or (getattr(state, "model_name", None)
                                         or state.engine.model_name,)


async def serve_realtime_session(websocket, state) -> None:
    await RealtimeSession(websocket, state, websocket.query_params.get("model")).run()
