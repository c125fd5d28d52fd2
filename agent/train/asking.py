"""How evaluation asks the agent: exactly as served (agent.pipeline.serve), keeping the model's
own first reply for the raw scores.

    agent = eval_agent(gen, snap, clarify_below, grounding, retry)
    asked = await ask(agent, engine, messages, params)   # Asked(text, call, last, final, record)

`ask` hears the messages through the agent's BEFORE rules (Agent.rewrite, what serve() runs),
decodes the reply to the end (the raw scores need all of it, also when the caller would have
been cut off at an unsure first block), then replays that reply through serve(): the AFTER rules
the server applies, the careful retry included. So `final` is what a caller of `diffvoice serve`
hears for these messages, and `text` what the model said.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

from diffvoice.agent import pipeline
from diffvoice.agent.data import DataGenerator
from diffvoice.agent.guard import ClarifyGuard, ClarifyRecord
from diffvoice.agent.pipeline import AFTER, BEFORE, Agent
from diffvoice.engine import Engine, SamplingParams


@dataclasses.dataclass
class Asked:
    text: str  # the model's reply (stripped) to the messages as the agent asked them
    call: dict | None  # its constrained tool call, if any
    last: Any  # its last Delta
    final: str  # what the caller hears (stripped): serve()'s reply
    record: ClarifyRecord  # what the AFTER rules did


RULES = (*(rule.name for rule in BEFORE), *AFTER)  # what `without` may name


def eval_agent(gen: DataGenerator, snap, clarify_below: float, grounding: bool = True,
               retry: bool = True, without: tuple[str, ...] = ()) -> Agent:
    """The served agent for evaluation's settings: the snap's BEFORE rules (None: none) and the
    clarify guard in whole-reply mode (agent.guard.clarify_guard_for's, with these switches).
    `without`: rules left out, by name (RULES: the BEFORE rules' names; "first_block" = no
    first-block test, "grounding", "careful_retry", "well_formed" = the first-block test alone,
    streamed as the guard's whole_reply=False, "replacement" = no AFTER rule at all)."""
    unknown = set(without) - set(RULES)
    if unknown:
        raise ValueError(f"unknown rule(s) {sorted(unknown)}; known: {list(RULES)}")
    d = gen.dialogues
    guard = None
    if "replacement" not in without:
        guard = ClarifyGuard(0.0 if "first_block" in without else clarify_below,
                             gen.is_well_formed, whole_reply="well_formed" not in without,
                             result_reply=d.result_reply,
                             is_flow_reply=d.is_flow_reply if grounding else None,
                             slot_question=d.slot_question, next_question=d.next_question,
                             retry=retry)
    return Agent.of(snap, guard, without)


async def _replay(deltas: list) -> AsyncIterator[Any]:
    for delta in deltas:
        yield delta


async def ask(agent: Agent, engine: Engine, messages: list[dict], params: SamplingParams,
              serve_reply: bool = True) -> Asked:
    """The model's reply and the served one (see the module docstring); `serve_reply=False`:
    the model's reply only (`final` is its text)."""
    rid = f"eval-{uuid.uuid4().hex[:12]}"
    asked = agent.rewrite(messages, engine.config.max_prompt_chars)
    text, last, call, deltas = "", None, None, []
    async for delta in engine.generate(asked, params, request_id=rid):
        deltas.append(delta)
        text += delta.text
        last = delta
        call = getattr(delta, "tool_call", None) or call
    record = ClarifyRecord()
    if not serve_reply:
        return Asked(text.strip(), call, last, text.strip(), record)
    final = ""
    async for delta in pipeline.serve(agent, engine, messages, params, request_id=rid,
                                      record=record, source=_replay(deltas),
                                      abort=lambda: None):
        final += delta.text
    return Asked(text.strip(), call, last, final.strip(), record)
