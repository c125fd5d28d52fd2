"""/v1/realtime driven by pipecat's own Realtime client, `OpenAIRealtimeLLMService`, inside a real
pipecat pipeline (Pipeline + PipelineWorker + WorkerRunner, LLMContext + LLMContextAggregatorPair
as pipecat's examples/realtime/realtime-openai.py wires them), against the real server (uvicorn,
Silero VAD, the committed random-weight tiny faster-whisper, espeak-ng TTS, the random-weight
diffusion engine: its words are gibberish, its constrained tool arguments schema-valid).

The service is subclassed only to listen: every client event pipecat sends is recorded, and every
raw server event it receives is validated with the openai SDK's `RealtimeServerEvent` union
before pipecat parses it. Each test asserts no event was invalid, no `error` event came back and
no ErrorFrame was pushed (pipecat treats most `error` events as fatal to the connection).

Covered: a spoken question under pipecat's default session (server VAD), a function call round
trip (tool in the LLMContext, tool_choice 'required', a registered handler), and pipecat's
barge-in truncate (`conversation.item.truncate` sent on speech_started, which can reach the
server while the answer is still in progress: the server once refused that with an `error`).
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import jsonschema
import numpy as np
import soxr
from openai.types.realtime import RealtimeServerEvent
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    ErrorFrame,
    Frame,
    FunctionCallResultFrame,
    InputAudioRawFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMRunFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.llm_service import FunctionCallParams
from pipecat.services.openai.realtime.events import SessionProperties
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner
from pydantic import TypeAdapter
from voice_fixtures import scaled

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
RATE = 24000  # pipecat's Realtime session format: audio/pcm at 24 kHz


class _Tap:
    """The service's websocket, with every received message shown to `sink` first."""

    def __init__(self, ws, sink) -> None:
        self._ws, self._sink = ws, sink

    def __getattr__(self, name):
        return getattr(self._ws, name)

    async def __aiter__(self):
        async for message in self._ws:
            self._sink(message)
            yield message


class ListeningRealtime(OpenAIRealtimeLLMService):
    """pipecat's service, unchanged but for recording both directions of the socket."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.sent: list[dict] = []  # client events, as pipecat serialised them
        self.received: list[dict] = []  # server events, each validated
        self.invalid: list[tuple[dict, str]] = []

    async def send_client_event(self, event) -> None:
        self.sent.append(event.model_dump(exclude_none=True))
        await super().send_client_event(event)

    async def _receive_task_handler(self):
        self._websocket = _Tap(self._websocket, self._seen)
        await super()._receive_task_handler()

    def _seen(self, message) -> None:
        event = json.loads(message)
        self.received.append(event)
        try:
            SERVER_EVENT.validate_python(event)
        except Exception as e:  # recorded, asserted on by the test (not raised in pipecat's loop)
            self.invalid.append((event, str(e)[:500]))

    def of(self, kind: str) -> list[dict]:
        return [e for e in self.received if e["type"] == kind]

    def errors_with_cause(self) -> list[tuple[dict, dict | None]]:
        """Each `error` event with the client event it names (by event_id), if any."""
        by_id = {e.get("event_id"): e for e in self.sent}
        return [(e, by_id.get(e["error"].get("event_id"))) for e in self.of("error")]


class Frames(FrameProcessor):
    """Keeps the frames that pass it, both directions, and passes them on."""

    def __init__(self, name: str) -> None:
        super().__init__(name=name)
        self.seen: list[tuple[Frame, FrameDirection]] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        self.seen.append((frame, direction))
        await self.push_frame(frame, direction)

    def of(self, kind, direction=None) -> list:
        return [f for f, d in self.seen if isinstance(f, kind) and direction in (None, d)]


class App:
    """The pipeline of pipecat's realtime example, minus the transport: test frames go in at the
    source (as a transport's input would push them); a tap on each side of the service sees what
    it pushes upstream (transcriptions, errors) and downstream (audio, text)."""

    def __init__(self, llm: ListeningRealtime, context: LLMContext) -> None:
        self.llm, self.context = llm, context
        pair = LLMContextAggregatorPair(context)
        self.up, self.out = Frames("up"), Frames("out")
        self.worker = PipelineWorker(
            Pipeline([pair.user(), self.up, llm, self.out, pair.assistant()]),
            params=PipelineParams(audio_in_sample_rate=RATE, audio_out_sample_rate=RATE),
            enable_rtvi=False, idle_timeout_secs=None)
        self.runner = WorkerRunner(handle_sigint=False)
        self.task: asyncio.Task | None = None

    async def __aenter__(self) -> App:
        await self.runner.add_workers(self.worker)
        self.task = asyncio.create_task(self.runner.run())
        await self.wait_for(lambda: self.llm.of("session.updated"), 30, "session.updated")
        return self

    async def __aexit__(self, *exc) -> None:
        await self.worker.cancel()
        await asyncio.wait_for(self.task, scaled(10))

    async def wait_for(self, predicate, within: float, what: str) -> None:
        deadline = time.monotonic() + scaled(within)
        while not predicate():
            if self.task.done():
                self.task.result()
                raise AssertionError(f"the pipeline ended before {what}")
            if self.llm.errors_with_cause() or self.up.of(ErrorFrame):
                break  # asserted on by check() with the detail
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} within {within} s; server events: "
                                     f"{[e['type'] for e in self.llm.received]}")
            await asyncio.sleep(0.02)

    async def say(self, pcm: np.ndarray) -> None:
        """24 kHz PCM into the pipeline as 20 ms InputAudioRawFrames, in real time."""
        chunk = RATE // 50
        t0 = time.monotonic()
        for i, start in enumerate(range(0, len(pcm), chunk)):
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await self.worker.queue_frame(InputAudioRawFrame(
                audio=pcm[start:start + chunk].tobytes(), sample_rate=RATE, num_channels=1))

    def check(self) -> None:
        """Every server event valid, no error event, no ErrorFrame."""
        if os.environ.get("RT_DEBUG"):
            for e in self.llm.sent:
                if e["type"] != "input_audio_buffer.append":
                    print("SENT", json.dumps(e)[:600])
            print("RECEIVED", [e["type"] for e in self.llm.received])
            print("CONTEXT", self.context.get_messages())
        assert not self.llm.invalid, self.llm.invalid[:3]
        assert not self.llm.errors_with_cause(), self.llm.errors_with_cause()
        assert not self.up.of(ErrorFrame), [f.error for f in self.up.of(ErrorFrame)]


def at_24k(pcm16k: bytes) -> np.ndarray:
    return soxr.resample(np.frombuffer(pcm16k, dtype=np.int16), 16000, RATE).astype(np.int16)


def service(live_server, **session) -> ListeningRealtime:
    host = live_server.ws_url.split("://", 1)[1].split("/", 1)[0]
    return ListeningRealtime(
        api_key="unused", base_url=f"ws://{host}/v1/realtime",
        settings=OpenAIRealtimeLLMService.Settings(
            model=live_server.state.model_name, session_properties=SessionProperties(**session)))


async def test_spoken_question_server_vad(live_server, speech):
    """espeak-ng speech at 24 kHz into the pipeline as 20 ms InputAudioRawFrames in real time;
    pipecat's default session (server VAD on): the server ends the turn and answers in audio."""
    pcm = at_24k(speech("hello, I would like to book a massage for tomorrow", tail_silence=1.5))
    llm = service(live_server)
    async with App(llm, LLMContext()) as app:
        await app.say(pcm)
        await app.wait_for(lambda: llm.of("response.done"), 60, "response.done")
        await app.wait_for(lambda: app.out.of(LLMFullResponseEndFrame), 10,
                           "LLMFullResponseEndFrame")
        app.check()

        # the turn: server VAD, the user's item and its transcript, one response
        assert llm.of("input_audio_buffer.speech_started")
        assert llm.of("input_audio_buffer.speech_stopped")
        done = llm.of("response.done")[0]["response"]
        assert done["status"] == "completed" and done["output_modalities"] == ["audio"]
        # pipecat's frames downstream of the service: the bot's audio and its transcript
        audio = b"".join(f.audio for f in app.out.of(OutputAudioRawFrame,
                                                     FrameDirection.DOWNSTREAM))
        assert {f.sample_rate for f in app.out.of(OutputAudioRawFrame)} == {RATE}
        assert len(audio) > RATE * 2 * 0.3  # over 0.3 s of the bot's voice
        spoken = "".join(f.text for f in app.out.of(TTSTextFrame, FrameDirection.DOWNSTREAM))
        transcript = llm.of("response.output_audio_transcript.done")[-1]["transcript"]
        assert spoken.strip() and spoken == transcript
        said = "".join(f.text for f in app.out.of(LLMTextFrame, FrameDirection.DOWNSTREAM))
        assert said == transcript  # pipecat's LLMTextFrames too (for RTVI's bot-llm-text)
        # the user's transcription, pushed upstream by the service to the user aggregator
        heard = app.up.of(TranscriptionFrame, FrameDirection.UPSTREAM)
        assert heard and heard[0].text.strip()
        completed = llm.of("conversation.item.input_audio_transcription.completed")
        assert heard[0].text == completed[0]["transcript"]
        # ...which the user aggregator wrote into the app's LLMContext
        user = {"role": "user", "content": heard[0].text}
        await app.wait_for(lambda: user in app.context.get_messages(), 5, "the user message")
        assert user in app.context.get_messages()
        # what pipecat sent was audio and its session (no response.create: server VAD's turn)
        assert {e["type"] for e in llm.sent} <= {"session.update", "input_audio_buffer.append"}


WEATHER = FunctionSchema(
    name="get_weather", description="The weather in a city",
    properties={"city": {"type": "string", "maxLength": 20},
                "unit": {"type": "string", "enum": ["c", "f"]}},
    required=["city", "unit"])


async def test_function_call(live_server):
    """A function tool in the LLMContext, tool_choice 'required': the model calls it, pipecat
    runs the registered handler with the (constrained, schema-valid) arguments, sends the
    result, and asks for the next response, which comes back as text."""
    calls: list[FunctionCallParams] = []

    async def get_weather(params: FunctionCallParams) -> None:
        calls.append(params)
        await params.result_callback({"temperature": 21, "conditions": "sunny"})

    llm = service(live_server, output_modalities=["text"], tool_choice="required")
    llm.register_function("get_weather", get_weather)
    context = LLMContext([{"role": "user", "content": "What is the weather in Paris?"}],
                         tools=ToolsSchema(standard_tools=[WEATHER]))
    async with App(llm, context) as app:
        await app.worker.queue_frame(LLMRunFrame())
        await app.wait_for(lambda: len(llm.of("response.done")) >= 2, 60, "two responses")
        await app.wait_for(lambda: len(app.out.of(LLMFullResponseEndFrame)) >= 2, 10,
                           "the second LLMFullResponseEndFrame")
        app.check()

        # the handler ran once, with arguments valid for the declared schema
        assert len(calls) == 1
        args = calls[0].arguments
        schema = {"type": "object", "properties": WEATHER.properties,
                  "required": WEATHER.required}
        jsonschema.validate(args, schema)
        first, second = (e["response"] for e in llm.of("response.done")[:2])
        assert first["status"] == "completed"
        call = [i for i in first["output"] if i["type"] == "function_call"]
        assert len(call) == 1 and call[0]["name"] == "get_weather"
        assert json.loads(call[0]["arguments"]) == args
        assert calls[0].tool_call_id == call[0]["call_id"]
        # pipecat sent the result as the call's function_call_output, then response.create
        outputs = [e for e in llm.sent if e["type"] == "conversation.item.create"
                   and e["item"]["type"] == "function_call_output"]
        assert len(outputs) == 1 and outputs[0]["item"]["call_id"] == call[0]["call_id"]
        assert json.loads(outputs[0]["item"]["output"]) == {"temperature": 21,
                                                            "conditions": "sunny"}
        assert app.out.of(FunctionCallResultFrame)
        # the second response: a text message, streamed as pipecat's LLMTextFrames
        assert second["status"] == "completed"
        assert [i["type"] for i in second["output"]] == ["message"]
        text = second["output"][0]["content"][0]["text"]
        streamed = "".join(f.text for f in app.out.of(LLMTextFrame, FrameDirection.DOWNSTREAM))
        assert text.strip() and streamed == text


async def test_interrupted_answer_is_truncated_while_live(live_server):
    """An InterruptionFrame while the answer's audio is coming in (what pipecat does on a local
    barge-in; on server VAD's speech_started it does the same): pipecat truncates the assistant
    item to what it has played, while the server's response is still in progress. The server
    acknowledges it (`conversation.item.truncated`, not an `error`: pipecat would drop the
    connection) and the item stays cut when the response ends."""
    llm = service(live_server)
    context = LLMContext([{"role": "user", "content": "Tell me about your services."}])
    async with App(llm, context) as app:
        await app.worker.queue_frame(LLMRunFrame())
        await app.wait_for(lambda: app.out.of(TTSAudioRawFrame), 30, "the answer's audio")
        await asyncio.sleep(0.2)
        assert not llm.of("response.done")  # still being said (the server paces its audio)
        await app.worker.queue_frame(InterruptionFrame())
        await app.wait_for(lambda: llm.of("response.done"), 30, "response.done")
        app.check()

        truncate = [e for e in llm.sent if e["type"] == "conversation.item.truncate"]
        assert len(truncate) == 1
        truncated = llm.of("conversation.item.truncated")
        assert len(truncated) == 1
        assert truncated[0]["item_id"] == truncate[0]["item_id"]
        assert truncated[0]["audio_end_ms"] == truncate[0]["audio_end_ms"]
        # acknowledged while the response was in progress: this is the live item's path
        types = [e["type"] for e in llm.received]
        assert types.index("conversation.item.truncated") < types.index("response.done")
        done = llm.of("response.done")[0]["response"]
        assert done["status"] == "completed"  # server VAD: the client's truncate cancels nothing
        message = done["output"][0]
        assert message["id"] == truncate[0]["item_id"]
        full = llm.of("response.output_audio_transcript.done")[0]["transcript"]
        cut = message["content"][0]["transcript"]
        assert len(cut) < len(full)  # the item keeps the truncate's shorter transcript


async def test_barge_in_with_server_vad(live_server, speech):
    """The caller speaks again while the answer plays: server VAD's speech_started makes pipecat
    truncate the item it was playing (before or after the server has cancelled the response:
    both orders must be accepted), and the second turn is answered."""
    first = at_24k(speech("hello, I would like to book a massage for tomorrow", tail_silence=0.8))
    second = at_24k(speech("no wait, make it friday afternoon please", lead_silence=0.0,
                           tail_silence=1.5))
    llm = service(live_server)
    async with App(llm, LLMContext()) as app:
        await app.say(first)
        await app.wait_for(lambda: llm.of("response.output_audio.delta"), 30, "the answer")
        await app.say(second)
        await app.wait_for(lambda: len(llm.of("response.done")) >= 2, 30, "the second answer")
        app.check()

        # the second utterance may be heard as two segments (its comma's pause)
        assert len(llm.of("input_audio_buffer.speech_started")) >= 2
        truncate = [e for e in llm.sent if e["type"] == "conversation.item.truncate"]
        first_done, second_done = (e["response"] for e in llm.of("response.done")[:2])
        assert len(truncate) == 1 and truncate[0]["item_id"] == first_done["output"][0]["id"]
        assert llm.of("conversation.item.truncated")[0]["item_id"] == truncate[0]["item_id"]
        assert first_done["status"] in ("cancelled", "completed")
        if first_done["status"] == "cancelled":
            assert first_done["status_details"]["reason"] == "turn_detected"
        assert second_done["status"] == "completed"
        assert len(llm.of("conversation.item.input_audio_transcription.completed")) >= 2
