"""Tool calling and response_format through the OpenAI API: the official client against the real
router (uvicorn on loopback) over a random-weight engine. Validity of every call and JSON answer
comes from constrained decoding, not from the model."""

from __future__ import annotations

import json

import jsonschema
import openai
import pytest
from test_openai_api import _Config, _engine, _LoopbackServer, _State

from diffvoice.engine.testing import make_random_checkpoint

TIME = r"^([01]\d|2[0-3]):([0-5]\d)$"
BOOK = {"type": "object", "properties": {
    "service": {"type": "string", "enum": ["cleanings", "fillings"]},
    "day": {"type": "string", "enum": ["monday", "friday"]},
    "time": {"type": "string", "pattern": TIME},
    "name": {"type": "string", "maxLength": 10}},
    "required": ["service", "day", "time", "name"]}
TOOLS = [{"type": "function", "function": {"name": "book_appointment",
                                           "description": "Book a visit.", "parameters": BOOK}},
         {"type": "function", "function": {"name": "hang_up", "parameters": {
             "type": "object", "properties": {}}}}]
FORCE = {"type": "function", "function": {"name": "book_appointment"}}
ASK = [{"role": "user", "content": "Book me a cleaning on Friday at ten, I'm Ann."}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("tools") / "m", family="sdar",
                                  init_std=0.5)
    engine = _engine(path, max_running=4)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    server = _LoopbackServer(_State(engine, _Config()))
    yield server
    server.close()


def _answer_after(client, engine, call_id, call, result, stream):
    """Second request of the round trip: the call and its result in the history."""
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(result)}]
    kwargs = dict(model=engine.model_name, messages=messages, tools=TOOLS, tool_choice="none",
                  max_tokens=8)
    if not stream:
        reply = client.chat.completions.create(**kwargs)
        assert reply.choices[0].finish_reason in ("stop", "length")
        assert reply.choices[0].message.tool_calls is None
        return reply.choices[0].message.content
    chunks = list(client.chat.completions.create(**kwargs, stream=True))
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(not c.choices[0].delta.tool_calls for c in chunks)
    return "".join(c.choices[0].delta.content or "" for c in chunks)


def test_round_trip_call_then_tool_result_then_answer(server, engine):
    client = server.client()
    reply = client.chat.completions.create(model=engine.model_name, messages=ASK, tools=TOOLS,
                                           tool_choice=FORCE)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "book_appointment"
    args = json.loads(call.function.arguments)
    jsonschema.validate(args, BOOK)
    assert reply.usage.completion_tokens > 0
    text = _answer_after(client, engine, call.id, call.function, {"booked": True}, stream=False)
    assert isinstance(text, str)


def test_streamed_call_is_shaped_as_openai_streams_it(server, engine):
    client = server.client()
    chunks = list(client.chat.completions.create(
        model=engine.model_name, messages=ASK, tools=TOOLS, tool_choice="required",
        stream=True))
    parts = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    head, rest = parts[0], parts[1:]
    assert head.index == 0 and head.id.startswith("call_") and head.type == "function"
    assert head.function.name in ("book_appointment", "hang_up")
    assert head.function.arguments == "" and rest
    assert all(p.index == 0 and p.id is None and p.function.name is None for p in rest)
    arguments = "".join(p.function.arguments for p in rest)
    schema = BOOK if head.function.name == "book_appointment" else TOOLS[1]["function"][
        "parameters"]
    jsonschema.validate(json.loads(arguments), schema)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    text = _answer_after(client, engine, head.id, type("F", (), {
        "name": head.function.name, "arguments": arguments}), {"booked": False}, stream=True)
    assert isinstance(text, str)


def test_auto_without_a_call_answers_in_text(server, engine):
    reply = server.client().chat.completions.create(
        model=engine.model_name, messages=[{"role": "user", "content": "hello"}], tools=TOOLS,
        max_tokens=8)
    assert reply.choices[0].finish_reason in ("stop", "length")
    assert reply.choices[0].message.tool_calls is None


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_schema(server, engine, stream):
    schema = {"type": "object", "properties": {
        "day": {"type": "string", "enum": ["monday", "friday"]},
        "open": {"type": "boolean"}, "note": {"type": "string", "maxLength": 12}}}
    kwargs = dict(model=engine.model_name, messages=ASK, temperature=1.0, seed=3,
                  response_format={"type": "json_schema",
                                   "json_schema": {"name": "hours", "schema": schema}})
    if stream:
        chunks = list(server.client().chat.completions.create(**kwargs, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        assert chunks[-1].choices[0].finish_reason == "stop"
    else:
        reply = server.client().chat.completions.create(**kwargs)
        text = reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop"
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("stream", [False, True])
def test_response_format_json_object(server, engine, stream):
    kwargs = dict(model=engine.model_name, messages=ASK, temperature=1.5, seed=5, max_tokens=32,
                  response_format={"type": "json_object"})
    if stream:
        chunks = list(server.client().chat.completions.create(**kwargs, stream=True))
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
    else:
        text = server.client().chat.completions.create(**kwargs).choices[0].message.content
    assert isinstance(json.loads(text), dict)


@pytest.mark.parametrize("kwargs, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"xs": {"type": "array"}}}}}],
      "tool_choice": "required"}, "tools"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
     "response_format.json_schema.schema"),
    ({"response_format": {"type": "yaml"}}, "response_format.type"),
])
def test_bad_tool_requests_get_400(server, engine, kwargs, param):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=engine.model_name, messages=ASK, **kwargs)
    assert caught.value.status_code == 400 and caught.value.param == param
