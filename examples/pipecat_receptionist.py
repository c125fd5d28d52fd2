"""A pipecat app that books an appointment with the shipped receptionist: DiffusionLLMService
with the agent's rules (`agent=Agent.for_model(model)`) and the appointment book's tools.

    python examples/pipecat_receptionist.py --book /tmp/book.sqlite3
    python examples/pipecat_receptionist.py "can I book a cleaning on friday at 10 am" \
        --name "sam jones" --book /tmp/book.sqlite3

One argument turns the receptionist's rules on: `agent=`. Without it the model's replies are said
as they are (no snapping of the caller's words to the questions it was trained on, no clarifying
question instead of an unsure or blended reply, no grounding of restated times). The tools are
pipecat function calls (`ReceptionistTools.register`), run against a SQLite appointment book;
pipecat's assistant context aggregator stores each call and its result and asks the LLM again,
which then says the outcome.

The caller here is text: each line goes into the context as the caller's turn, where a voice app
has its STT (and the agent's replies go to a collector where it has its TTS); the caller answers
the agent's questions for a day, a time, a service or a name from the command line. Prints the
conversation and the booking the book holds; exits 0 when a booking was made.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import sys

from pipecat.frames.frames import (
    EndFrame,
    Frame,
    LLMFullResponseEndFrame,
    LLMMessagesAppendFrame,
    LLMTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMAssistantAggregator
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner

from diffvoice.agent.pipeline import Agent
from diffvoice.agent.tools import ReceptionistTools
from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig
from diffvoice.voice.llm_service import DiffusionLLMService


class Replies(FrameProcessor):
    """Collects each spoken reply (a TTS service would speak it) and wakes the caller."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.said: asyncio.Queue[str] = asyncio.Queue()

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.parts.append(frame.text)
        elif isinstance(frame, LLMFullResponseEndFrame) and "".join(self.parts).strip():
            # a reply with words (a tool call's response has none: the outcome follows)
            self.said.put_nowait("".join(self.parts).strip())
            self.parts = []
        await self.push_frame(frame, direction)


def answer(question: str, slots: dict[str, str]) -> str | None:
    """The caller's answer to the agent's question, or None when it asked nothing we know."""
    q = question.lower()
    for slot, words in (("name", ("name",)), ("time", ("what time", "which time", "times")),
                        ("day", ("what day", "which day")),
                        ("service", ("come in for", "which service", "what would you like"))):
        if any(w in q for w in words) and slot in slots:
            return slots[slot]
    return None


async def book(first: str, slots: dict[str, str], model: str, db: str,
               turns: int = 6) -> list[tuple[str, str]]:
    engine = Engine.from_pretrained(model, EngineConfig(max_running=2))
    tools = ReceptionistTools.for_model(model, db_path=db)
    llm = DiffusionLLMService(engine, system_prompt=None, max_new_tokens=48,
                              agent=Agent.for_model(model))  # the receptionist's rules
    tools.register(llm, caller="example-caller")
    context = LLMContext(messages=[], tools=tools.tools_schema())
    replies = Replies()
    worker = PipelineWorker(Pipeline([llm, replies, LLMAssistantAggregator(context)]),
                            params=PipelineParams(), enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    conversation = []
    try:
        await runner.add_workers(worker)
        running = asyncio.create_task(runner.run())
        line: str | None = first
        for _ in range(turns):
            if line is None:
                break
            conversation.append(("caller", line))
            await worker.queue_frame(LLMMessagesAppendFrame(
                messages=[{"role": "user", "content": line}], run_llm=True))
            reply = await asyncio.wait_for(replies.said.get(), timeout=120)
            conversation.append(("agent", reply))
            if "booked" in reply.lower():
                break
            line = answer(reply, slots)
        await worker.queue_frame(EndFrame())
        await running
    finally:
        engine.close()
    return conversation


def booking(db: str) -> tuple | None:
    with sqlite3.connect(db) as con:
        row = con.execute("SELECT service, day, start_min, name FROM visits").fetchone()
    return None if row is None else (row[0], row[1], f"{row[2] // 60:02d}:{row[2] % 60:02d}",
                                     row[3])


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("first", nargs="?", default="can I book a cleaning on friday at 10 am")
    parser.add_argument("--name", default="sam jones")
    parser.add_argument("--day", default="friday")
    parser.add_argument("--time", default="10 am")
    parser.add_argument("--service", default="a cleaning")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR))
    parser.add_argument("--book", required=True, help="the SQLite appointment book to write")
    args = parser.parse_args()
    slots = {"name": args.name, "day": args.day, "time": args.time, "service": args.service}
    for who, text in asyncio.run(book(args.first, slots, args.model, args.book)):
        print(f"{who}: {text}")
    made = booking(args.book)
    print(f"booked: {made}" if made else "no booking")
    sys.exit(0 if made else 1)
