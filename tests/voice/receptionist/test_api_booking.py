"""A booking through the OpenAI API with the shipped receptionist model and its served tools
(ReceptionistTools.schemas: open days, the book's start times, day/time narrowed to what was
said, the name copied from the caller's words), tool_choice auto, with the official openai
client on loopback: slot filling over two turns, then the call with exactly the caller's values;
the call runs against the SQLite book and its result goes back as a `tool` message."""

from __future__ import annotations

import json

import pytest
from test_openai_api import _LoopbackServer, _State
from voice_fixtures import RouterConfig

from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig

pytestmark = pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "model.safetensors").is_file(),
                                reason="models/receptionist-tiny not present")


def test_api_booking_over_two_turns(tmp_path):
    from diffvoice.agent.tools import ReceptionistTools

    tools = ReceptionistTools.for_model(DEFAULT_MODEL_DIR, db_path=tmp_path / "book.sqlite3")
    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(max_running=2))
    try:
        server = _LoopbackServer(_State(engine, RouterConfig()))
        try:
            client = server.client()

            def ask(messages):
                r = client.chat.completions.create(model=engine.model_name, messages=messages,
                                                   tools=tools.schemas, tool_choice="auto")
                return r.choices[0]

            # as Whisper tiny.en hears the spoken test's caller (test_spoken_booking.py)
            messages = [{"role": "user", "content": "I need a cleaning on Friday. 10am."}]
            first = ask(messages)
            assert first.finish_reason == "stop" and "name" in first.message.content.lower()
            messages += [{"role": "assistant", "content": first.message.content},
                         {"role": "user", "content": "My name is Sam Jones."}]
            second = ask(messages)
            assert second.finish_reason == "tool_calls", second
            call = second.message.tool_calls[0]
            args = json.loads(call.function.arguments)
            assert (call.function.name, args) == ("book_appointment", {
                "service": "cleanings", "day": "friday", "time": "10:00", "name": "sam jones"})
            result = tools.call(call.function.name, args)
            assert result == {"booked": True}
            messages += [{"role": "assistant", "content": None, "tool_calls": [{
                "id": call.id, "type": "function", "function": {
                    "name": call.function.name, "arguments": call.function.arguments}}]},
                {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
            third = client.chat.completions.create(model=engine.model_name, messages=messages,
                                                   tools=tools.schemas, tool_choice="none")
            assert third.choices[0].finish_reason == "stop"
            assert "booked" in third.choices[0].message.content.lower()
        finally:
            server.close()
    finally:
        engine.close()
    assert tools.book.free_starts("cleanings", "friday").count("10:00") == 0


def test_plain_receptionist_tools_are_decoded_with_the_served_schemas(tmp_path):
    """An API client that sends the receptionist's tools as docs/tool-calling.md writes them
    (the training schemas: any weekday, a time pattern) gets them decoded with the served ones
    (`x-diffvoice-tools: served`) and books as the served tools do; other tools are left
    alone. `diffvoice tools` prints the served ones."""
    from types import SimpleNamespace

    from diffvoice.agent.facts import load_facts
    from diffvoice.agent.tool_schemas import tool_schemas
    from diffvoice.agent.tools import ReceptionistTools, served_tool_schemas

    tools = ReceptionistTools.for_model(DEFAULT_MODEL_DIR, db_path=tmp_path / "book.sqlite3")
    assert served_tool_schemas(DEFAULT_MODEL_DIR) == tools.schemas
    plain = tool_schemas(load_facts(DEFAULT_MODEL_DIR / "facts.yaml"))
    assert plain != tools.schemas and tools.same_tools(plain)
    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(max_running=2))
    try:
        state = SimpleNamespace(engine=engine, config=RouterConfig(), receptionist=tools)
        server = _LoopbackServer(state)
        try:
            client = server.client()
            def ask(messages, tools):
                raw = client.chat.completions.with_raw_response.create(
                    model=engine.model_name, messages=messages, tools=tools, tool_choice="auto")
                return raw.headers, raw.parse().choices[0]

            messages = [{"role": "user", "content": "I need a cleaning on Friday. 10am."}]
            headers, first = ask(messages, plain)
            assert headers.get("x-diffvoice-tools") == "served"
            assert first.finish_reason == "stop" and "name" in first.message.content.lower()
            messages += [{"role": "assistant", "content": first.message.content},
                         {"role": "user", "content": "My name is Sam Jones."}]
            headers, second = ask(messages, plain)
            assert headers.get("x-diffvoice-tools") == "served"
            assert second.finish_reason == "tool_calls", second
            call = second.message.tool_calls[0]
            args = json.loads(call.function.arguments)
            assert (call.function.name, args) == ("book_appointment", {
                "service": "cleanings", "day": "friday", "time": "10:00", "name": "sam jones"})
            assert tools.call(call.function.name, args) == {"booked": True}
            other = [{"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object", "properties": {"city": {"type": "string"}}}}}]
            headers, _ = ask(messages, other)
            assert "x-diffvoice-tools" not in headers
        finally:
            server.close()
    finally:
        engine.close()
