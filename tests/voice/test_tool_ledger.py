"""A booking the caller never heard is not a booking (voice.tool_ledger, agent.book's held
changes): the receptionist's real tools and SQLite book, the real (random-weight) engine and
DiffusionLLMService under pipecat's run_test, with a stand-in voice after the LLM (one audio
frame per text frame, optionally late) and the ledger at the output, as voice.pipeline wires it.

The model's decision is stood in for (the tool forced, its arguments fixed by one-value enums,
so the book's answer is known); everything after it is the product's."""

from __future__ import annotations

import asyncio
import json

import pytest
from book_facts import facts_file
from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.tests.utils import SleepFrame, run_test
from voice_fixtures import RANDOM_LLM, scaled

from diffvoice.agent.book import BOOKED, CANCELLING, HELD
from diffvoice.agent.tools import UNAVAILABLE, ReceptionistTools
from diffvoice.voice.frame_tap import FrameTap
from diffvoice.voice.llm_service import DiffusionLLMService
from diffvoice.voice.tool_ledger import ToolLedger

CALLER = "session:test"


# ---------------------------------------------------------------------------- the ledger alone

class _Book:
    def __init__(self) -> None:
        self.settled: list[tuple[list[int], bool]] = []

    def settle(self, ids, keep) -> None:
        self.settled.append((list(ids), keep))


def _audio() -> OutputAudioRawFrame:
    return OutputAudioRawFrame(audio=b"\0\0" * 160, sample_rate=8000, num_channels=1)


async def test_kept_when_the_next_answer_starts_playing():
    book = _Book()
    ledger = ToolLedger(book.settle)
    assert ledger.holder("c1")([7])
    await ledger.on_frame("out", _audio())  # the tail of an earlier answer confirms nothing
    assert book.settled == []
    await ledger.on_frame("out", LLMFullResponseStartFrame())
    await ledger.on_frame("out", _audio())
    assert book.settled == [([7], True)]
    assert ledger.log[-1]["outcome"] == "kept"


async def test_undone_by_a_barge_in_before_the_confirmation_played():
    book = _Book()
    ledger = ToolLedger(book.settle)
    assert ledger.holder("c1")([7])
    await ledger.on_frame("out", LLMFullResponseStartFrame())
    await ledger.on_frame("out", InterruptionFrame())
    await ledger.on_frame("out", _audio())
    assert book.settled == [([7], False)]


async def test_a_tool_that_finishes_after_the_barge_in_is_refused():
    book = _Book()
    ledger = ToolLedger(book.settle)
    hold = ledger.holder("c1")  # the tool starts ...
    await ledger.on_frame("out", InterruptionFrame())  # ... the caller talks over the reply
    assert hold([7]) is False  # ... its change comes back: the tool undoes it (agent.tools)
    assert ledger.log[-1] == {"call_id": "c1", "ids": [7], "outcome": "undone",
                              "why": "reply discarded while the tool ran"}


async def test_one_change_per_call_id():
    ledger = ToolLedger(_Book().settle)
    assert ledger.holder("c1")([7])
    assert ledger.holder("c1")([8]) is False  # a retry of the same call


async def test_the_end_of_the_call_undoes_what_is_held():
    book = _Book()
    ledger = ToolLedger(book.settle)
    assert ledger.holder("c1")([7])
    await ledger.close()
    assert book.settled == [([7], False)]
    assert ledger.holder("c2")([9]) is False  # nothing is held after the end


async def test_a_text_answer_confirms_at_its_first_text():
    book = _Book()
    ledger = ToolLedger(book.settle)
    assert ledger.holder("c1")([7])
    await ledger.on_frame("out", LLMFullResponseStartFrame())
    text = LLMTextFrame("You're booked.")
    text.skip_tts = True
    await ledger.on_frame("out", text)
    assert book.settled == [([7], True)]


# ---------------------------------------------------------------------------- the real book

@pytest.fixture
def tools(tmp_path):
    return ReceptionistTools.for_model(tmp_path, db_path=tmp_path / "book.sqlite3",
                                       facts_path=facts_file(tmp_path))


def test_held_changes_settle(tools):
    book = tools.book
    service = next(iter(book.durations))
    day = next(d for d, h in book.hours.items() if h)
    start = book.starts(service, day)[0]
    time_ = f"{start // 60:02d}:{start % 60:02d}"
    held = []
    assert tools.call("book_appointment", {"service": service, "day": day, "time": time_,
                                           "name": "Ann"}, caller=CALLER,
                      hold=lambda ids: held.extend(ids) or True) == {"booked": True}
    assert [b.state for b in book.bookings()] == [HELD]
    assert time_ not in book.free_starts(service, day)  # a held booking takes its slot
    book.settle(held, keep=True)
    assert [b.state for b in book.bookings()] == [BOOKED]
    cancelling = []
    assert tools.call("cancel_appointment", {"name": "Ann", "day": day}, caller=CALLER,
                      hold=lambda ids: cancelling.extend(ids) or True) == {"cancelled": True}
    assert [b.state for b in book.bookings()] == [CANCELLING]
    book.settle(cancelling, keep=False)  # not heard: the visit is back
    assert [b.state for b in book.bookings()] == [BOOKED]
    book.settle(cancelling, keep=False)  # settling twice changes nothing
    assert [b.state for b in book.bookings()] == [BOOKED]
    refused = []
    assert tools.call("cancel_appointment", {"name": "Ann", "day": day}, caller=CALLER,
                      hold=lambda ids: refused.extend(ids) and False) == {"cancelled": True}
    assert [b.state for b in book.bookings()] == [BOOKED]  # refused by the ledger: undone
    assert book.undo_stale(older_than_s=0.0) == 0


def test_stale_held_changes_are_undone_at_start(tools):
    book = tools.book
    service = next(iter(book.durations))
    day = next(d for d, h in book.hours.items() if h)
    start = book.starts(service, day)[0]
    assert book.book(service, day, f"{start // 60:02d}:{start % 60:02d}", "Bo", owner=CALLER,
                     hold=True)
    assert book.undo_stale(older_than_s=3600.0) == 0
    assert book.undo_stale(older_than_s=0.0) == 1
    assert book.bookings() == []


# ---------------------------------------------------------------------------- in a call

class _Voice(FrameProcessor):
    """Stands in for the TTS and the output: one 20 ms audio frame after each text frame,
    each answer's audio starting `late` seconds after its first text (the engine and TTS
    being slow), and `on_answer` called at each answer's start."""

    def __init__(self, late: float = 0.0, on_answer=None) -> None:
        super().__init__()
        self.late, self.on_answer, self.answers = late, on_answer, 0
        self._first = True

    async def process_frame(self, frame, direction) -> None:
        await super().process_frame(frame, direction)
        await self.push_frame(frame, direction)
        if direction != FrameDirection.DOWNSTREAM:
            return
        if isinstance(frame, LLMFullResponseStartFrame):
            self.answers += 1
            self._first = True
            if self.on_answer is not None:
                self.on_answer(self.answers)
        elif isinstance(frame, LLMTextFrame):
            if self._first and self.late:
                await asyncio.sleep(self.late)
            self._first = False
            await self.push_frame(_audio())


def _slot(tools):
    book = tools.book
    service = next(iter(book.durations))
    day = next(d for d, h in book.hours.items() if h)
    start = book.starts(service, day)[0]
    return service, day, f"{start // 60:02d}:{start % 60:02d}"


async def _booking_turn(engine, tools, *, late=0.0, slow_tool=0.0, barge_in=None):
    """One forced booking turn; `barge_in`: "tool" (while the tool runs) or "confirmation"
    (when the answer that says the result starts, before its audio). Returns the ledger."""
    service, day, time_ = _slot(tools)
    props = {"service": {"type": "string", "enum": [service]},
             "day": {"type": "string", "enum": [day]},
             "time": {"type": "string", "enum": [time_]},
             "name": {"type": "string", "enum": ["Ann"]}}
    schema = ToolsSchema(standard_tools=[FunctionSchema(
        name="book_appointment", description="Book a visit.", properties=props,
        required=list(props))])
    llm = DiffusionLLMService(engine, system_prompt=None, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM)
    ledger = ToolLedger(tools.settle)
    tools.register(llm, caller=CALLER, ledger=ledger)
    if slow_tool or barge_in == "tool":
        real = tools.book.book

        def slow_book(*args, **kwargs):
            import time

            time.sleep(slow_tool)
            return real(*args, **kwargs)

        tools.book.book = slow_book
        if barge_in == "tool":
            asyncio.get_running_loop().call_later(
                slow_tool / 3, lambda: asyncio.ensure_future(llm.queue_frame(
                    InterruptionFrame())))

    def on_answer(n: int) -> None:
        if barge_in == "confirmation" and n == 2:
            asyncio.ensure_future(llm.queue_frame(InterruptionFrame()))

    context = LLMContext(messages=[{"role": "user", "content": "Book me in, please."}],
                         tools=schema, tool_choice={"type": "function",
                                                    "function": {"name": "book_appointment"}})
    pair = LLMContextAggregatorPair(context)
    await run_test(Pipeline([llm, _Voice(late, on_answer), FrameTap("out", ledger.on_frame),
                             pair.assistant()]),
                   frames_to_send=[LLMContextFrame(context), SleepFrame(sleep=scaled(4.0))])
    await ledger.close()
    return ledger, context


async def test_a_confirmed_booking_is_kept(random_engine, tools):
    ledger, context = await _booking_turn(random_engine, tools)
    assert [b.state for b in tools.book.bookings()] == [BOOKED]
    assert [e["outcome"] for e in ledger.log] == ["kept"]
    tool = next(m for m in context.get_messages() if m["role"] == "tool")
    assert json.loads(tool["content"]) == {"booked": True}


async def test_barge_in_while_the_tool_runs_leaves_no_booking(random_engine, tools):
    """Before held changes the booking was written anyway (the book's thread finished after
    pipecat cancelled the handler): a ghost appointment the caller never heard of."""
    ledger, context = await _booking_turn(random_engine, tools, slow_tool=1.5,
                                          barge_in="tool")
    assert tools.book.bookings() == []
    assert [e["outcome"] for e in ledger.log] == ["undone"]
    tool = next(m for m in context.get_messages() if m["role"] == "tool")
    assert tool["content"] == "CANCELLED"  # finished in the context, not left in progress


async def test_barge_in_before_the_confirmation_plays_undoes_the_booking(random_engine, tools):
    ledger, _ = await _booking_turn(random_engine, tools, late=0.5, barge_in="confirmation")
    assert tools.book.bookings() == []
    assert [(e["outcome"], e["why"]) for e in ledger.log] == [
        ("undone", "barge-in before the confirmation played")]


async def test_a_failing_book_gets_an_answer_not_silence(random_engine, tools):
    """The book raising (a locked or missing database) ends the call with an error result the
    model reads and answers, not an exception that leaves the turn unanswered."""
    def broken(*args, **kwargs):
        raise OSError("disk I/O error")

    tools.book.book = broken
    ledger, context = await _booking_turn(random_engine, tools)
    tool = next(m for m in context.get_messages() if m["role"] == "tool")
    assert json.loads(tool["content"]) == {"error": UNAVAILABLE}
    assert context.get_messages()[-1]["role"] == "assistant"  # the result was answered
    assert context.get_messages()[-1]["content"]
    assert ledger.log == []


@pytest.mark.parametrize("final", ["Book me in for friday, please.", "Book me in, please."],
                         ids=["draft-discarded", "draft-taken"])
async def test_a_drafts_call_runs_only_as_the_turns_answer(random_engine, tools, final):
    """An eager draft made while the caller was still talking holds a tool call; the call runs
    once, for the turn's answer: never from a draft that the final transcript discarded, and
    not twice when the draft is the answer."""
    service, day, time_ = _slot(tools)
    props = {"service": {"type": "string", "enum": [service]},
             "day": {"type": "string", "enum": [day]},
             "time": {"type": "string", "enum": [time_]},
             "name": {"type": "string", "enum": ["Ann"]}}
    schema = ToolsSchema(standard_tools=[FunctionSchema(
        name="book_appointment", description="Book a visit.", properties=props,
        required=list(props))])
    context = LLMContext(messages=[], tools=schema, tool_choice={
        "type": "function", "function": {"name": "book_appointment"}})
    llm = DiffusionLLMService(random_engine, system_prompt=None, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM, draft_context=context)
    ran = []

    async def handler(params):
        ran.append(llm.drafts.last_turn.hit)  # was this turn's answer the draft?
        await params.result_callback({"booked": True})

    llm.register_function("book_appointment", handler)
    pair = LLMContextAggregatorPair(context)

    async def draft_then_answer() -> None:
        await asyncio.sleep(0.3)  # the pipeline below has started
        draft = llm.drafts.propose("Book me in, please.")  # the interim transcript
        await asyncio.wait_for(asyncio.shield(draft.task), scaled(30))
        assert draft.done and ran == []  # a finished draft ran nothing
        context.add_message({"role": "user", "content": final})
        await llm.queue_frame(LLMContextFrame(context))

    task = asyncio.ensure_future(draft_then_answer())
    await run_test(Pipeline([llm, pair.assistant()]),
                   frames_to_send=[SleepFrame(sleep=scaled(8.0))])
    await task
    assert ran == [final == "Book me in, please."]  # once, from the draft only if taken
