"""Ask instead of blending, at run time: the clarify guard on the serving paths.

    guard = clarify_guard_for(config, warnings)     # ClarifyGuard | None (ServeConfig fields)
    async for delta in guard.wrap(engine.generate(...), abort=lambda: engine.abort(rid)): ...
The AFTER rules of agent.pipeline (the rule itself: agent.clarify), applied to a stream of engine
`Delta`s by agent.pipeline.serve for the voice pipeline's DiffusionLLMService, the OpenAI API
and `eval-model`:
  * first block: when the engine's own `Delta.first_block_confidence` (the lowest softmax
    probability of any token it committed in the reply's first block) is below `threshold`,
    the request is aborted at once and the caller gets CLARIFY ("Sorry, was that about our
    hours, our prices, or an appointment?") instead of the reply — before anything was spoken;
  * whole reply (`whole_reply=True`): the reply is held until it is complete and replaced by
    CLARIFY when it is not well-formed (not exactly an answer the model's fact sheet yields, a
    flow reply shape or a call: agent.data.DataGenerator.is_well_formed). This costs the
    rest of the reply's decoding before the first word is spoken (a few blocks for this model);
    `whole_reply=False` streams as before and applies only the first-block test;
  * grounding (whole reply, with `messages`): a booking-flow reply (`is_flow_reply`) that states
    a time or a day nobody said is mended before it is spoken (agent.grounding: the one
    value the caller pointed at written in place, or after a tool result the trained result
    reply, or a slot question stating a value nobody said replaced by the question for what
    the call still lacks); `ClarifyRecord.grounding` says what was done;
  * the first-block test only for requests the threshold is calibrated for
    (`ClarifyGuard.calibrated(params)`: "fast" decoding, which every tool-carrying request uses);
  * careful retry (`wrap(..., retry=...)`: a function starting the same request again with
    `Engine.careful_params`, one token per pass): before a whole reply that is not well-formed
    is replaced, it is decoded once more; the retry's reply is said instead when it is
    well-formed (after grounding), `agrees` with the blend (agent.clarify) and passes
    the first-block test; `ClarifyRecord.retried` says so. It costs about twice the first
    decode, only for blended replies;
  * tool calls pass unchanged (a constrained call is well-formed by construction), and so do
    replies whose request carried no text (errors, aborts);
  * after a tool result (`wrap(..., messages=...)` whose last message is a `tool` message
    answering an assistant tool call) the replacement is not the generic question but the reply
    the model is trained to give for that call and result (the training flows' own sentence:
    "You're booked for a cleaning on Friday at 10 AM.", agent.dialogue_flows
    `result_reply`), so an unsure confirmation is still the right one, not a non-sequitur; and
    mid-booking (the assistant's last message asked for a slot) the next slot-filling question
    for the slots the conversation holds (agent.dialogues `slot_question`: "What time on
    Friday would you like to come in for a cleaning?"), not the hours-or-prices question.
A clarified delta is the last one: text CLARIFY, finished, finish_reason "stop",
`clarified=True` set on the guard's `last` record. `clarify_guard_for` builds a guard from
ServeConfig: clarify "off" -> None; "auto" -> a guard when the model directory has a facts.yaml
(the receptionist), else None; "on" -> a guard or a ValueError naming the problem.
Knows nothing about pipecat or HTTP.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from diffvoice.agent.clarify import CLARIFY, DEFAULT_THRESHOLD, agrees, replacement
from diffvoice.agent.grounding import ground
from diffvoice.engine.requests import prompt_chars

# messages (engine.requests.prompt_chars) grounded on the event loop itself; more: off it
GROUND_INLINE_CHARS = 4096

CLARIFY_MODES = ("auto", "on", "off")


@dataclasses.dataclass
class ClarifyRecord:
    clarified: bool = False
    reason: str | None = None            # "first_block" | "not_well_formed"
    question: str | None = None          # what replaced the reply (CLARIFY or a result reply)
    first_block_confidence: float | None = None
    grounding: str | None = None         # agent.grounding's `how` for the whole reply
    retried: bool = False                # the careful retry's reply replaced a blend
    retry_text: str | None = None        # the careful retry's reply, when one was decoded


class ClarifyGuard:
    def __init__(self, threshold: float = DEFAULT_THRESHOLD,
                 is_well_formed: Callable[[str], bool] | None = None,
                 whole_reply: bool = True, question: str = CLARIFY,
                 result_reply: Callable[[str, dict, dict], str | None] | None = None,
                 is_flow_reply: Callable[[str], bool] | None = None,
                 slot_question: Callable[[list[dict]], str | None] | None = None,
                 next_question: Callable[[list[dict]], str | None] | None = None,
                 retry: bool = True) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"clarify_below must be in [0, 1], got {threshold}")
        if whole_reply and is_well_formed is None:
            raise ValueError("the whole-reply test needs an is_well_formed function")
        self.threshold = threshold
        self.is_well_formed = is_well_formed
        self.whole_reply = whole_reply
        self.question = question
        self.result_reply = result_reply
        self.is_flow_reply = is_flow_reply
        self.slot_question = slot_question
        self.next_question = next_question
        self.retry = retry  # whether agent.pipeline.serve starts the careful retry

    def question_for(self, messages: list[dict] | None) -> str:
        """The replacement for an unsure reply to `messages`: after a tool result, the reply
        the model is trained to give for that result; otherwise the clarifying question."""
        return replacement(messages, self.result_reply, self.slot_question, self.question)

    def _clarified(self, delta, record: ClarifyRecord, reason: str, question: str):
        record.clarified, record.reason, record.question = True, reason, question
        return dataclasses.replace(delta, text=question, finished=True,
                                   finish_reason="stop", tool_call=None)

    @staticmethod
    def calibrated(params, default_decoding: str = "reference") -> bool:
        """Whether the first-block test applies to a request with these SamplingParams: the
        threshold was chosen on confidences of the engine's "fast" decoding (which every
        constrained / tool-carrying request uses); the family's "reference" decoding commits
        its least sure tokens last by schedule, so its first-block minimum runs much lower
        (e.g. 0.28 for the right answer to "what are your hours"). `default_decoding`: what
        decoding None means for the serving engine's model (Engine.default_decoding)."""
        decoding = getattr(params, "decoding", "fast") or default_decoding
        return decoding == "fast" or bool(getattr(params, "tools", ()))

    async def _careful(self, retry: Callable[[], AsyncIterator[Any]], raw: str,
                       messages: list[dict] | None, record: ClarifyRecord
                       ) -> tuple[Any, str] | None:
        """(the retry's last delta, its text as said) when the careful retry of the blended
        `raw` may be said instead (see the module docstring), else None."""
        text, last = "", None
        async with contextlib.aclosing(retry()) as stream:
            async for delta in stream:
                if getattr(delta, "tool_call", None) is not None:
                    return None  # a call is not a retry of this text reply
                text, last = text + delta.text, delta
        text = text.strip()
        record.retry_text = text
        if last is None or not last.finished or last.finish_reason not in ("stop", "length") \
                or not agrees(raw, text):
            return None
        how = None
        if self.is_flow_reply is not None and messages:
            text, how = ground(text, messages, self.is_flow_reply, self.result_reply,
                               self.next_question)
        # the retry is always "fast"-decoded (Engine.careful_params), which the threshold is
        # calibrated for: its first block is tested whatever the first decode's decoding was
        conf = getattr(last, "first_block_confidence", None)
        if not self.is_well_formed(text) or (conf is not None and conf < self.threshold):
            return None
        record.retried, record.grounding = True, how
        return last, text

    async def wrap(self, deltas: AsyncIterator[Any], abort: Callable[[], None],
                   record: ClarifyRecord | None = None,
                   first_block: bool = True,
                   messages: list[dict] | None = None,
                   retry: Callable[[], AsyncIterator[Any]] | None = None,
                   pool: Executor | None = None) -> AsyncIterator[Any]:
        """The engine's deltas, guarded (see the module docstring); `first_block=False` skips
        the confidence test (see `calibrated`); `messages` (the request's) choose the
        replacement (`question_for`); `retry` starts the careful retry of a blended reply.
        Grounding scans every message (tool_call arguments too): past GROUND_INLINE_CHARS of
        them it runs on `pool` (default: the loop's default executor), not on the loop."""
        record = record if record is not None else ClarifyRecord()
        question = self.question_for(messages)
        held: list = []
        checked = not first_block
        async for delta in deltas:
            conf = getattr(delta, "first_block_confidence", None)
            if not checked and conf is not None:
                checked = True
                record.first_block_confidence = conf
                if conf < self.threshold and getattr(delta, "tool_call", None) is None:
                    if not delta.finished:
                        abort()
                    yield self._clarified(delta, record, "first_block", question)
                    return
            if getattr(delta, "tool_call", None) is not None or not self.whole_reply:
                for d in held:  # nothing is held back once a call (or streaming) is certain
                    yield d
                held = []
                yield delta
                continue
            held.append(delta)
            if not delta.finished:
                continue
            whole = "".join(d.text for d in held)
            text = whole.strip()
            if text and delta.finish_reason in ("stop", "length"):
                raw = text
                if self.is_flow_reply is not None and messages:
                    args = (text, messages, self.is_flow_reply, self.result_reply,
                            self.next_question)
                    if prompt_chars(messages) > GROUND_INLINE_CHARS:
                        grounded, record.grounding = await asyncio.get_running_loop(
                        ).run_in_executor(pool, ground, *args)
                    else:  # a call's few messages: well under a millisecond
                        grounded, record.grounding = ground(*args)
                    whole = grounded if grounded != text else whole
                    text = grounded
                if not self.is_well_formed(text):
                    again = None if retry is None else await self._careful(
                        retry, raw, messages, record)
                    if again is None:
                        yield self._clarified(delta, record, "not_well_formed", question)
                        return
                    yield dataclasses.replace(again[0], text=again[1])
                    return
            merged = dataclasses.replace(delta, text=whole)
            held = []
            yield merged
        for d in held:  # the stream ended without a final delta (engine gone): pass it on
            yield d


def clarify_guard_for(config, warnings: list[str] | None = None) -> ClarifyGuard | None:
    """A guard for `config.model` per ServeConfig's clarify fields (see the module docstring)."""
    mode = getattr(config, "clarify", "off")
    if mode == "off":
        return None
    facts = Path(config.model) / "facts.yaml"
    if not facts.is_file():
        if mode == "on":
            raise ValueError(f"clarify: {facts} not found (the guard needs the model's fact "
                             "sheet to tell a well-formed reply)")
        return None
    try:
        from diffvoice.agent.data import DataGenerator
        from diffvoice.agent.facts import load_facts

        gen = DataGenerator(load_facts(facts))
    except (ImportError, OSError, ValueError) as exc:
        if mode == "on":
            raise ValueError(f"clarify: {exc}") from exc
        if warnings is not None:
            warnings.append(f"clarify guard disabled: {exc}")
        return None
    return ClarifyGuard(config.clarify_below, gen.is_well_formed, config.clarify_whole_reply,
                        result_reply=gen.dialogues.result_reply,
                        is_flow_reply=gen.dialogues.is_flow_reply,
                        slot_question=gen.dialogues.slot_question,
                        next_question=gen.dialogues.next_question)


def guard_of(state) -> ClarifyGuard | None:
    """The server's guard, built once from `state.config` and kept on the state object."""
    guard = getattr(state, "_clarify_guard", _UNSET)
    if guard is _UNSET:
        guard = clarify_guard_for(state.config, getattr(state, "warnings", None))
        state._clarify_guard = guard
    return guard


_UNSET = object()
