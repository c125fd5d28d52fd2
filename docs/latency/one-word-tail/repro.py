"""Why a one-word answer waits the 1 s window in the turn-taking bench: the agent answers a
booking question with opening hours, a statement, so the caller's next word ("afternoon",
"yes") is not an answer to a question (voice.turn_end.looks_complete) and waits the window.

The shipped receptionist through the served agent (agent.pipeline.serve: its BEFORE and AFTER
rules), the server's system prompt, sampling and the appointment book's tools, as a voice call
asks: the same booking question first in a call, and later in a call after an hours answer and
after a price answer (a later turn passes the agent's rules unchanged, LaterTurnKept).
`python docs/latency/one-word-tail/repro.py > docs/latency/one-word-tail/repro.txt`"""

from __future__ import annotations

import asyncio
from pathlib import Path

from diffvoice.agent.pipeline import Agent, serve
from diffvoice.agent.tools import served_tool_schemas
from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.voice.config import ServeConfig

MODEL = Path("models/receptionist-tiny")
HISTORIES = {
    "first in the call": [],
    "after an hours answer": [
        {"role": "user", "content": "When are you open on Saturday?"},
        {"role": "assistant", "content": "On Saturdays we're open from 9 am to 1 pm."}],
    "after a price answer": [
        {"role": "user", "content": "How much is a cleaning?"},
        {"role": "assistant", "content": "A cleaning is 95 dollars."}],
}
QUESTIONS = ["Do you have time on Thursday for a checkup?",
             "Can I come in for a filling this week?",
             "Can I book teeth whitening on Monday?",
             # as Whisper tiny.en heard two of them over Twilio in the 19:50 UTC run
             "Can I come in for a feeling this week?",
             "You can time on Thursday to take a cup."]


async def main() -> None:
    config = ServeConfig()
    agent = Agent.for_model(MODEL)
    params = SamplingParams(max_new_tokens=config.max_new_tokens,
                            steps_per_block=config.steps_per_block,
                            tools=tuple(served_tool_schemas(MODEL)))
    engine = Engine.from_pretrained(MODEL, EngineConfig(device="cpu"))
    try:
        for label, history in HISTORIES.items():
            for i, question in enumerate(QUESTIONS):
                messages = [{"role": "system", "content": config.system_prompt}, *history,
                            {"role": "user", "content": question}]
                text, call = "", None
                async for d in serve(agent, engine, messages, params,
                                     request_id=f"{label}-{i}"):
                    text += d.text or ""
                    call = getattr(d, "tool_call", None) or call
                said = f"tool call {call['name']}" if call else repr(text)
                print(f"{label:21s} | {question:43s} -> {said}", flush=True)
    finally:
        engine.close()


if __name__ == "__main__":
    asyncio.run(main())
