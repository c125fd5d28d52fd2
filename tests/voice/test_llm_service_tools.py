"""DiffusionLLMService function calling under pipecat's run_test, real (random-weight) engine:
a forced call reaches the handler registered with register_function (FunctionCallParams), the
result goes back into the context through pipecat's assistant aggregator, the service is
re-prompted and speaks; barge-in during a call follows cancel_on_interruption."""

from __future__ import annotations

import asyncio
import json

import jsonschema
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import InterruptionFrame, LLMContextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.tests.utils import SleepFrame, run_test
from voice_fixtures import RANDOM_LLM, scaled

from diffvoice.voice.llm_service import DiffusionLLMService
from diffvoice.voice.transport import protocol

PROPS = {"service": {"type": "string", "enum": ["cleanings", "fillings"]},
         "day": {"type": "string", "enum": ["monday", "friday"]},
         "time": {"type": "string", "pattern": r"^([01]\d|2[0-3]):([0-5]\d)$"},
         "name": {"type": "string", "maxLength": 10}}
SCHEMA = {"type": "object", "properties": PROPS, "required": list(PROPS)}
TOOLS = ToolsSchema(standard_tools=[FunctionSchema(
    name="book_appointment", description="Book a visit.", properties=PROPS,
    required=list(PROPS))])
FORCED = {"type": "function", "function": {"name": "book_appointment"}}
USER = [{"role": "user", "content": "Book a cleaning on Friday at ten for Ann."}]


def _service(engine, **kwargs):
    return DiffusionLLMService(engine, system_prompt=None, max_new_tokens=16,
                               sampling_overrides=RANDOM_LLM, **kwargs)


def _forced_booking(engine):
    """A service whose context forces book_appointment, with a handler that books: (llm, the
    handler's calls, the context, its aggregator pair)."""
    llm = _service(engine)
    calls = []

    async def book(params):
        calls.append(params)
        await params.result_callback({"booked": True})

    llm.register_function("book_appointment", book)
    context = LLMContext(messages=list(USER), tools=TOOLS, tool_choice=FORCED)
    return llm, calls, context, LLMContextAggregatorPair(context)


async def test_call_runs_the_handler_and_the_result_reprompts_the_service(random_engine):
    requests: list[list[dict]] = []
    real_generate = random_engine.generate

    def spy(messages, params, request_id=None):
        requests.append((messages, params))
        return real_generate(messages, params, request_id=request_id)

    random_engine.generate = spy
    try:
        llm, calls, context, pair = _forced_booking(random_engine)
        down, _ = await run_test(
            Pipeline([llm, pair.assistant()]),
            frames_to_send=[LLMContextFrame(context), SleepFrame(sleep=3.0)])
    finally:
        random_engine.generate = real_generate
    assert len(calls) == 1
    (call,) = calls
    assert call.function_name == "book_appointment"
    jsonschema.validate(call.arguments, SCHEMA)
    # the context now holds the call and its result, and the second request carried them
    messages = context.get_messages()
    assistant = next(m for m in messages if m.get("tool_calls"))
    assert assistant["tool_calls"][0]["function"]["name"] == "book_appointment"
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == call.arguments
    tool = next(m for m in messages if m["role"] == "tool")
    assert json.loads(tool["content"]) == {"booked": True}
    assert len(requests) == 2
    second_messages, second_params = requests[1]
    assert second_params.tool_choice == "none"  # one call per turn, then the outcome is said
    assert any(m["role"] == "tool" for m in second_messages)
    # the outcome is spoken: the text frames of the second answer became the last message
    assert messages[-1]["role"] == "assistant" and messages[-1]["content"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "assistant"]


async def _barge_in_during_call(engine, cancel_on_interruption: bool):
    llm = _service(engine)
    state = {"started": 0, "cancelled": 0, "finished": 0}

    async def slow(params):
        state["started"] += 1
        # the caller talks over the bot while the tool runs (as the user aggregator would send)
        asyncio.get_running_loop().call_later(
            0.2, lambda: asyncio.ensure_future(llm.queue_frame(InterruptionFrame())))
        try:
            await asyncio.sleep(1.5)
        except asyncio.CancelledError:
            state["cancelled"] += 1
            raise
        state["finished"] += 1
        await params.result_callback({"booked": True})

    llm.register_function("book_appointment", slow,
                          cancel_on_interruption=cancel_on_interruption)
    context = LLMContext(messages=list(USER), tools=TOOLS, tool_choice=FORCED)
    pair = LLMContextAggregatorPair(context)
    await run_test(Pipeline([llm, pair.assistant()]),
                   frames_to_send=[LLMContextFrame(context), SleepFrame(sleep=scaled(6.0))])
    tool = next(m for m in context.get_messages() if m["role"] == "tool")
    return state, tool["content"]


async def test_barge_in_cancels_a_call_with_cancel_on_interruption(random_engine):
    state, result = await _barge_in_during_call(random_engine, True)
    assert state == {"started": 1, "cancelled": 1, "finished": 0}
    assert result != json.dumps({"booked": True})  # pipecat marks it cancelled instead


async def test_barge_in_leaves_an_uncancellable_call_running(random_engine):
    state, result = await _barge_in_during_call(random_engine, False)
    assert state == {"started": 1, "cancelled": 0, "finished": 1}
    assert json.loads(result) == {"booked": True}


async def test_a_tool_turn_is_one_answer_one_latency_record(random_engine):
    """A user turn whose answer calls a tool and then speaks the result is one answer: one
    latency record (tool_calls=1) holding the user's side and the spoken outcome. Before, the
    call (nothing spoken) and its re-prompt gave two records: the first without audio, the second
    without the user's turn, so tool turns had no latency at all and the storm counted them as
    answered twice (docs/reliability.md)."""
    from diffvoice.voice.frame_tap import FrameTap
    from diffvoice.voice.turn_tracker import TurnTracker

    llm, calls, context, pair = _forced_booking(random_engine)
    events = []

    async def emit(event):
        events.append(event)

    tracker = TurnTracker(session_id="s", stop_secs=0.2, emit=emit, turn_info=llm.turn_info)
    await run_test(Pipeline([llm, FrameTap("llm", tracker.on_frame), pair.assistant()]),
                   frames_to_send=[LLMContextFrame(context), SleepFrame(sleep=scaled(3.0))])
    await tracker.close()
    assert len(calls) == 1
    spoken = [m for m in context.get_messages() if m["role"] == "assistant" and m.get("content")]
    assert spoken, "the re-prompt spoke the outcome"
    records = tracker.records
    assert len(records) == 1, [(r["turn"], r["bot_text"], r["tool_calls"]) for r in records]
    (record,) = records
    assert record["turn"] == 1 and record["tool_calls"] == 1
    assert record["bot_text"].strip() and record["answer_passes"] > 0
    assert [e.turn for e in events if isinstance(e, protocol.Latency)] == [1]
