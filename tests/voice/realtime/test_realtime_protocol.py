"""/v1/realtime's answers to client mistakes, unsupported features and every client event type
the SDK has, over a plain WebSocket (what an attacker or a buggy client sends), against the
real server. Every server event is validated with the SDK's `RealtimeServerEvent` union."""

from __future__ import annotations

import asyncio
import base64
import json
import typing

import pytest
import websockets
from openai.types.realtime import RealtimeClientEvent, RealtimeServerEvent
from pydantic import TypeAdapter
from voice_fixtures import scaled

SERVER_EVENT = TypeAdapter(RealtimeServerEvent)


def client_event_types() -> list[str]:
    union = typing.get_args(RealtimeClientEvent)[0] if typing.get_origin(
        RealtimeClientEvent) is typing.Annotated else RealtimeClientEvent
    return sorted(typing.get_args(m.model_fields["type"].annotation)[0]
                  for m in typing.get_args(union))


class Raw:
    def __init__(self, ws) -> None:
        self.ws = ws

    async def send(self, event) -> None:
        await self.ws.send(event if isinstance(event, (str, bytes)) else json.dumps(event))

    async def recv(self, within: float = 30.0):
        raw = await asyncio.wait_for(self.ws.recv(), scaled(within))
        return SERVER_EVENT.validate_python(json.loads(raw))

    async def until(self, *kinds: str, within: float = 30.0):
        while True:
            event = await self.recv(within)
            if event.type in kinds:
                return event


def realtime_url(live_server, model: str | None = None) -> str:
    base = live_server.ws_url.rsplit("/ws", 1)[0]
    return f"{base}/v1/realtime" + (f"?model={model}" if model else "")


async def opened(live_server) -> tuple:
    ws = await websockets.connect(realtime_url(live_server, live_server.state.model_name),
                                  max_size=None, ping_interval=None)
    raw = Raw(ws)
    assert (await raw.until("session.created", within=60)).session.type == "realtime"
    return ws, raw


MISTAKES = [
    ("not json", "{nope", "invalid_json", None),
    ("not an object", "[1, 2]", "invalid_event", "type"),
    ("no type", {"event_id": "e1"}, "invalid_event", "type"),
    ("unknown type", {"type": "session.destroy"}, "invalid_event", "type"),
    ("binary frame", b"\x00\x01", "invalid_event", None),
    ("huge event", json.dumps({"type": "session.update", "session": {
        "instructions": "x" * 300_000}}), "event_too_large", None),
    ("bad base64", {"type": "input_audio_buffer.append", "audio": "!!!"}, "invalid_value",
     "audio"),
    ("append too large", {"type": "input_audio_buffer.append",
                          "audio": base64.b64encode(b"\0" * 150_000).decode()},
     "audio_too_large", "audio"),
    ("append not a string", {"type": "input_audio_buffer.append", "audio": 5},
     "invalid_value", "audio"),
    ("commit empty", {"type": "input_audio_buffer.commit"}, "input_audio_buffer_commit_empty",
     None),
    ("transcription session", {"type": "session.update", "session": {"type": "transcription"}},
     "unsupported", "session.type"),
    ("bad modality", {"type": "session.update", "session": {"output_modalities": ["video"]}},
     "invalid_value", "session.output_modalities"),
    ("bad format", {"type": "session.update", "session": {"audio": {"input": {
        "format": {"type": "audio/opus"}}}}}, "invalid_value", "session.audio.input.format"),
    ("pcm at 16 kHz", {"type": "session.update", "session": {"audio": {"output": {
        "format": {"type": "audio/pcm", "rate": 16000}}}}}, "invalid_value",
     "session.audio.output.format"),
    ("bad threshold", {"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "server_vad", "threshold": 7}}}}}, "invalid_value",
     "session.audio.input.turn_detection.threshold"),
    ("bad eagerness", {"type": "session.update", "session": {"audio": {"input": {
        "turn_detection": {"type": "semantic_vad", "eagerness": "frantic"}}}}},
     "invalid_value", "session.audio.input.turn_detection.eagerness"),
    ("noise reduction not an object", {"type": "session.update", "session": {"audio": {
        "input": {"noise_reduction": "loud"}}}}, "invalid_value",
     "session.audio.input.noise_reduction"),
    ("mcp tool", {"type": "session.update", "session": {"tools": [
        {"type": "mcp", "server_label": "x"}]}}, "unsupported_tool_type", "session.tools[0].type"),
    ("bad tool schema", {"type": "session.update", "session": {"tools": [
        {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {
            "a": {"type": "strin"}}}}]}}, "invalid_value", "session.tools"),
    ("tool_choice names no tool", {"type": "session.update", "session": {
        "tool_choice": {"type": "function", "name": "missing"}}}, "invalid_value",
     "session.tool_choice"),
    ("max tokens", {"type": "session.update", "session": {"max_output_tokens": 0}},
     "invalid_value", "session.max_output_tokens"),
    ("other model", {"type": "session.update", "session": {"model": "gpt-realtime"}},
     "invalid_value", "session.model"),
    ("stored prompt", {"type": "session.update", "session": {"prompt": {"id": "p"}}},
     "unsupported", "session.prompt"),
    ("speed", {"type": "session.update", "session": {"audio": {"output": {"speed": 1.2}}}},
     "unsupported", "session.audio.output.speed"),
    ("image input", {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_image",
                                                        "image_url": "data:,"}]}},
     "unsupported", "item.content[0]"),
    ("item audio", {"type": "conversation.item.create", "item": {
        "type": "message", "role": "user", "content": [{"type": "input_audio",
                                                        "audio": "AAAA"}]}},
     "unsupported", "item.content[0]"),
    ("bad role", {"type": "conversation.item.create", "item": {
        "type": "message", "role": "robot", "content": [{"type": "input_text", "text": "x"}]}},
     "invalid_value", "item.role"),
    ("insert mid-conversation", {"type": "conversation.item.create", "previous_item_id": "x",
                                 "item": {"type": "message", "role": "user", "content": [
                                     {"type": "input_text", "text": "x"}]}},
     "unsupported", "previous_item_id"),
    ("model's own call", {"type": "conversation.item.create", "item": {
        "type": "function_call", "name": "f", "call_id": "c", "arguments": "{}"}},
     "unsupported", "item.type"),
    ("unknown output", {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "nobody", "output": "{}"}},
     "invalid_value", "item.call_id"),
    ("retrieve missing", {"type": "conversation.item.retrieve", "item_id": "nope"},
     "item_not_found", "item_id"),
    ("delete missing", {"type": "conversation.item.delete", "item_id": "nope"},
     "item_not_found", "item_id"),
    ("truncate missing", {"type": "conversation.item.truncate", "item_id": "nope",
                          "content_index": 0, "audio_end_ms": 0}, "item_not_found", "item_id"),
    ("cancel nothing", {"type": "response.cancel"}, "response_cancel_not_active", None),
    ("out-of-band response", {"type": "response.create", "response": {"conversation": "none"}},
     "unsupported", "response.conversation"),
    ("response input", {"type": "response.create", "response": {"input": []}}, "unsupported",
     "response.input"),
    ("output buffer clear", {"type": "output_audio_buffer.clear"}, "unsupported", None),
]


@pytest.mark.parametrize("event,code,param", [m[1:] for m in MISTAKES],
                         ids=[m[0] for m in MISTAKES])
async def test_each_mistake_is_one_error_event_and_the_session_goes_on(live_server, event, code,
                                                                      param):
    ws, raw = await opened(live_server)
    try:
        if isinstance(event, dict):
            event = {**event, "event_id": "client_evt_1"}
        await raw.send(event)
        error = await raw.until("error")
        assert error.error.code == code, error.error.message
        assert error.error.param == param
        if isinstance(event, dict):
            assert error.error.event_id == "client_evt_1"
        # the session is still there and still answers
        await raw.send({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "hi"}]}})
        assert (await raw.until("conversation.item.added", "error")).type == \
            "conversation.item.added"
    finally:
        await ws.close()


async def test_every_client_event_type_of_the_sdk_is_handled(live_server):
    """Each type the SDK can send gets an answer: its own event, or an error naming why."""
    from diffvoice.voice.realtime.session import CLIENT_EVENTS

    assert sorted(CLIENT_EVENTS) == client_event_types()
    answers = {
        "session.update": ({"session": {"instructions": "Be brief."}}, "session.updated"),
        "input_audio_buffer.append": ({"audio": base64.b64encode(b"\0" * 9600).decode()},
                                      None),
        "input_audio_buffer.commit": ({}, "input_audio_buffer.committed"),
        "input_audio_buffer.clear": ({}, "input_audio_buffer.cleared"),
        "conversation.item.create": ({"item": {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "hello"}]}}, "conversation.item.added"),
        "conversation.item.retrieve": ({"item_id": "first"}, "conversation.item.retrieved"),
        "conversation.item.truncate": ({"item_id": "first", "content_index": 0,
                                        "audio_end_ms": 0}, "error"),  # a user text item
        "conversation.item.delete": ({"item_id": "first"}, "conversation.item.deleted"),
        "response.create": ({"response": {"output_modalities": ["text"]}}, "response.created"),
        "response.cancel": ({}, "response.done"),
        "output_audio_buffer.clear": ({}, "error"),  # WebRTC only
    }
    assert sorted(answers) == client_event_types()
    ws, raw = await opened(live_server)
    try:
        await raw.send({"type": "conversation.item.create", "item": {
            "id": "first", "type": "message", "role": "user",
            "content": [{"type": "input_text", "text": "first"}]}})
        await raw.until("conversation.item.done")
        order = ["session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
                 "input_audio_buffer.clear", "conversation.item.create",
                 "conversation.item.retrieve", "conversation.item.truncate",
                 "conversation.item.delete", "response.create", "response.cancel",
                 "output_audio_buffer.clear"]
        for kind in order:
            fields, expected = answers[kind]
            await raw.send({"type": kind, "event_id": f"evt-{kind}", **fields})
            if expected is None:
                continue
            event = await raw.until(expected, "error")
            assert event.type == expected, (kind, event)
            if expected == "error":
                assert event.error.event_id == f"evt-{kind}"
            if kind == "response.cancel":
                assert event.response.status == "cancelled"
    finally:
        await ws.close()


async def test_a_response_while_one_is_active_is_an_error(live_server):
    ws, raw = await opened(live_server)
    try:
        await raw.send({"type": "session.update", "session": {"output_modalities": ["text"]}})
        await raw.until("session.updated")
        await raw.send({"type": "response.create", "response": {"max_output_tokens": 64}})
        await raw.send({"type": "response.create"})
        error = await raw.until("error")
        assert error.error.code == "conversation_already_has_active_response"
        done = await raw.until("response.done", within=60)
        assert done.response.status == "completed"
    finally:
        await ws.close()


async def test_unknown_model_is_refused_with_a_reason(live_server):
    async with websockets.connect(realtime_url(live_server, "gpt-realtime")) as ws:
        event = SERVER_EVENT.validate_python(json.loads(await ws.recv()))
        assert event.type == "error" and event.error.code == "model_not_found"
        with pytest.raises(websockets.ConnectionClosed):
            await ws.recv()
        assert ws.close_code == 1008


async def test_noise_reduction_is_accepted_and_reported_as_not_applied(live_server):
    """pipecat's Realtime example asks for near_field noise reduction (and treats an error
    event as fatal): the session goes on, and session.updated says none is applied."""
    ws, raw = await opened(live_server)
    try:
        await raw.send({"type": "session.update", "session": {"type": "realtime", "audio": {
            "input": {"noise_reduction": {"type": "near_field"},
                      "turn_detection": {"type": "semantic_vad"}}}}})
        updated = await raw.until("session.updated", "error")
        assert updated.type == "session.updated"
        assert updated.session.audio.input.noise_reduction is None
        assert updated.session.audio.input.turn_detection.type == "semantic_vad"
    finally:
        await ws.close()


def test_every_event_type_the_server_emits_is_one_of_the_sdks():
    """The types named at every `emit(...)` in voice/realtime/session.py (the only place events
    are made) are all in the SDK's RealtimeServerEvent union; the tests above validate the
    events' fields as they arrive."""
    import ast
    import inspect

    from diffvoice.voice.realtime import session

    tree = ast.parse(inspect.getsource(session))
    emitted = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "emit":
            first = node.args[0]
            if isinstance(first, ast.Constant):
                emitted.add(first.value)
            else:  # a conditional expression of two literal types
                emitted |= {n.value for n in ast.walk(first) if isinstance(n, ast.Constant)
                            and isinstance(n.value, str)}
    union = typing.get_args(RealtimeServerEvent)[0] if typing.get_origin(
        RealtimeServerEvent) is typing.Annotated else RealtimeServerEvent
    sdk_types = {typing.get_args(m.model_fields["type"].annotation)[0]
                 for m in typing.get_args(union)}
    assert len(emitted) > 25
    assert emitted <= sdk_types, emitted - sdk_types


async def test_a_client_tool_may_not_take_a_server_tools_name():
    """With the receptionist's tools in the server (the embedded model), a client tool of the
    same name would be run by the server instead of the client: refused, naming the tool."""
    from types import SimpleNamespace

    from diffvoice.voice.realtime import config as rc
    from diffvoice.voice.realtime.session import RealtimeSession

    state = SimpleNamespace(receptionist=SimpleNamespace(schemas=[
        {"type": "function", "function": {"name": "book_appointment", "parameters": {}}}]))
    session = RealtimeSession(SimpleNamespace(client=None), state, None)
    clash = rc.parse_tools([{"type": "function", "name": "get_weather"},
                            {"type": "function", "name": "book_appointment"}], "session.tools")
    with pytest.raises(rc.RealtimeError) as refused:
        await session._check_tools(clash, "auto")
    assert refused.value.param == "tools[1].name" and "book_appointment" in refused.value.message
