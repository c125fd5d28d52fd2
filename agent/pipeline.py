"""The demo agent as served: its rules in one ordered pipeline around the model, and `serve()`,
the only runner of that pipeline.

    agent = Agent.for_model(model_dir)                  # the receptionist's rules for that model
    async for delta in serve(agent, engine, messages, params, request_id=rid): ...

The server's voice path (voice.llm_service.DiffusionLLMService), the OpenAI-compatible API
(voice.openai_api.router) and offline evaluation (`diffvoice eval-model`: agent.train.evaluate
and its closed-loop booking calls, agent.train.episodes) all answer through `serve()`.

BEFORE the model (messages -> messages; the first rule that decides, decides), on a request
whose last message is the caller's plain text:
  1. SlotAnswer      a later turn that answers the agent's slot question ("let's do friday")
                     is heard as the value alone ("friday") (agent.slot_reading)
  2. FollowUp        a later turn that asks the previous answer again for another service or
                     day, or "book that", becomes the training question it means
  3. LaterTurnKept   any other later turn passes unchanged (it needs its context)
  4. FirstTurnSnap   a first turn is heard as the nearest training question: intent snapping
                     (the intent head, preferring questions this model answers as trained,
                     agent.verify_bank; sound-alike service words), else paraphrase snapping,
                     else the booking opener with the same slot values (agent.paraphrase)
  Then, inside the engine and generic to it: a tool schema whose slots the conversation has not
  filled yet is narrowed to what was said (engine.constrained.context).
AFTER the model (a reply -> the reply, a retry, or the replacement), on the deltas:
  1. FirstBlockConfidence   an unsure first block (the engine's own confidence below the
                            threshold, on calibrated requests) -> the request is aborted and
                            the replacement said instead, before anything is spoken
  2. Grounding              a booking-flow reply stating a day or time nobody said is mended
                            (agent.grounding)
  3. WellFormed             a reply that is not one the fact sheet yields goes to 4
  4. CarefulRetry           decoded again one token per pass; said when it agrees with the
                            blend, is well-formed and sure (after grounding)
  5. Replacement            otherwise the clarifying question, or after a tool result the trained
                            result reply, or mid-booking the next slot question (agent.clarify)
  Tool calls pass unchanged (constrained: well-formed by construction).
(agent.guard.ClarifyGuard runs the AFTER rules on a stream; this module orders and runs both.)

Each BEFORE rule is a small class `rule(turn) -> messages | None` (None: not decided, the next
rule runs); an `Agent` holds the rules it was built with, so a rule left out (`without=`) is off,
which is how the ablation measures each (docs/agent-ablation.md). Knows nothing about pipecat or
HTTP; the engine knows nothing about the agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Executor
from pathlib import Path
from typing import Any

from diffvoice.agent.clarify import DEFAULT_THRESHOLD as CLARIFY_THRESHOLD
from diffvoice.agent.data import normalize
from diffvoice.agent.guard import ClarifyGuard, ClarifyRecord, clarify_guard_for
from diffvoice.agent.paraphrase import DEFAULT_THRESHOLD as PARAPHRASE_THRESHOLD
from diffvoice.agent.paraphrase import ParaphraseSnap
from diffvoice.engine.requests import prompt_chars

log = logging.getLogger(__name__)

# the longest request (characters of message text) the BEFORE rules read when the engine does
# not say its own bound: a longer one is refused as sent (EngineConfig.max_prompt_chars), so no
# rule spends time on it, nor turns it into a short, accepted one
MAX_RULE_CHARS = 32_000


@dataclasses.dataclass(frozen=True)
class Turn:
    """What a BEFORE rule reads: the request's messages, the caller's last message."""

    messages: list[dict]
    text: str
    later: bool  # the caller or the agent spoke earlier in this conversation

    def said(self, text: str) -> list[dict]:
        """The messages with the caller's last message replaced by `text`."""
        return [*self.messages[:-1], {**self.messages[-1], "content": text}]


class SlotAnswer:
    name = "slot_answer"

    def __init__(self, snap) -> None:
        self.snap = snap

    def __call__(self, turn: Turn) -> list[dict] | None:
        if not turn.later or self.snap.slot_answer is None:
            return None
        reduced = self.snap.slot_answer(turn.messages)
        if reduced is None:
            return None
        # already nothing but the value: decided, kept as said
        return turn.messages if normalize(reduced) == normalize(turn.text) else \
            turn.said(reduced)


class FollowUp:
    name = "follow_up"

    def __init__(self, snap) -> None:
        self.snap = snap

    def __call__(self, turn: Turn) -> list[dict] | None:
        if not turn.later:
            return None
        follow = self.snap.follow_up(turn.messages)
        return None if follow is None else turn.said(follow)


class LaterTurnKept:
    name = "later_turn_kept"

    def __init__(self, snap) -> None:
        self.snap = snap

    def __call__(self, turn: Turn) -> list[dict] | None:
        return turn.messages if turn.later and self.snap.single_turn_only else None


class FirstTurnSnap:
    name = "first_turn_snap"

    def __init__(self, snap) -> None:
        self.snap = snap

    def __call__(self, turn: Turn) -> list[dict] | None:
        s = self.snap.snap(turn.text)
        return turn.said(s.text) if s.swapped else turn.messages


BEFORE: tuple[type, ...] = (SlotAnswer, FollowUp, LaterTurnKept, FirstTurnSnap)
AFTER: tuple[str, ...] = ("first_block", "grounding", "well_formed", "careful_retry",
                          "replacement")  # agent.guard.ClarifyGuard's parts, in this order


@dataclasses.dataclass
class Agent:
    """The rules one served model answers with: BEFORE rules (in BEFORE's order) and the AFTER
    rules' guard (None: the model's reply is said as it is)."""

    before: Sequence[Callable[[Turn], list[dict] | None]] = ()
    guard: ClarifyGuard | None = None

    @classmethod
    def of(cls, snap=None, guard: ClarifyGuard | None = None,
           without: Sequence[str] = ()) -> Agent:
        """An agent of a paraphrase snap (agent.paraphrase.ParaphraseSnap, or None: no BEFORE
        rule) and a guard (None: no AFTER rule); `without`: rule names left out (the BEFORE
        classes' `name`; "grounding" and "careful_retry" of the guard)."""
        before = [] if snap is None else [rule(snap) for rule in BEFORE
                                          if rule.name not in without]
        if guard is not None and "grounding" in without:
            guard.is_flow_reply = None
        if guard is not None and "careful_retry" in without:
            guard.retry = False
        return cls(before, guard)

    @classmethod
    def for_model(cls, model_dir: str | Path, *, paraphrase: float | None = None,
                  intent: float | None = None, clarify: str = "auto",
                  clarify_below: float | None = None, whole_reply: bool = True,
                  without: Sequence[str] = (), warnings: list[str] | None = None) -> Agent:
        """The receptionist's rules for `model_dir`, as `diffvoice serve` builds them (no rule
        for a model without a fact sheet: a plain model is served as it is). `paraphrase` /
        `intent`: the snapping thresholds (None: the shipped defaults; above 1: off);
        `clarify` "auto" | "on" | "off", `clarify_below`, `whole_reply`: the AFTER rules
        (agent.guard); `without`: see `of`."""
        model_dir = Path(model_dir)
        snap = None
        paraphrase = PARAPHRASE_THRESHOLD if paraphrase is None else paraphrase
        if (model_dir / "facts.yaml").is_file():
            kw = {} if intent is None else {"intent_threshold": None if intent > 1 else intent}
            snap = ParaphraseSnap.for_model(model_dir, threshold=paraphrase, **kw)
        guard = clarify_guard_for(_GuardConfig(str(model_dir), clarify, clarify_below,
                                               whole_reply), warnings)
        return cls.of(snap, guard, without)

    def rewrite(self, messages: list[dict], max_chars: int = MAX_RULE_CHARS) -> list[dict]:
        """`messages` as the model is asked them: the first BEFORE rule that decides (a new
        list; the input is not changed). An error in a rule keeps the messages as sent, and so
        does a request over `max_chars` of text."""
        if not self.before or isinstance(messages, str) or not messages:
            return messages
        last = messages[-1]
        text = last.get("content") if isinstance(last, dict) else None
        if last.get("role") != "user" or not isinstance(text, str) or not text.strip():
            return messages
        if prompt_chars(messages) > max_chars:
            return messages  # refused as sent by the engine; no rule spends time on it
        turn = Turn(list(messages), text, any(m.get("role") in ("user", "assistant", "tool")
                                              for m in messages[:-1]))
        try:
            for rule in self.before:
                out = rule(turn)
                if out is not None:
                    return out
        except Exception as exc:  # a broken rule must not fail the request
            log.warning("%s failed, messages kept as sent: %r", type(rule).__name__, exc)
        return messages


@dataclasses.dataclass(frozen=True)
class _GuardConfig:  # the fields agent.guard.clarify_guard_for reads
    model: str
    clarify: str
    clarify_below: float | None
    clarify_whole_reply: bool

    def __post_init__(self) -> None:
        if self.clarify_below is None:
            object.__setattr__(self, "clarify_below", CLARIFY_THRESHOLD)


def _generate(engine, messages, params, request_id: str, chat_template_kwargs,
              priority: int = 0, client: str | None = None):
    extra: dict[str, Any] = {"priority": priority} if priority else {}  # 0: as calls call it
    if client is not None:
        extra["client"] = client
    if chat_template_kwargs is None:
        return engine.generate(messages, params, request_id=request_id, **extra)
    return engine.generate(messages, params, request_id=request_id,
                           chat_template_kwargs=chat_template_kwargs, **extra)


def calibrated(params, engine) -> bool:
    """Whether the first-block test applies to these SamplingParams on this engine."""
    return ClarifyGuard.calibrated(params, getattr(engine, "default_decoding", "reference"))


async def serve(agent: Agent | None, engine: Any, messages: list[dict] | str, params, *,
                request_id: str, record: ClarifyRecord | None = None,
                source: AsyncIterator[Any] | None = None,
                abort: Callable[[], None] | None = None,
                on_request: Callable[[str], None] | None = None,
                chat_template_kwargs: dict | None = None,
                priority: int = 0, pool: Executor | None = None,
                client: str | None = None) -> AsyncIterator[Any]:
    """The agent's answer to `messages`, as deltas: the BEFORE rules (in a worker thread, off
    the event loop), the engine's decode (or `source`, a draft already decoding the rewritten
    messages), the AFTER rules. `abort` stops the request in flight (default
    engine.abort(request_id)); `on_request(rid)` is told each engine request this answer
    starts (the careful retry is a second one); `record` receives what the AFTER rules did;
    `priority` and `client` are the engine's (0, the default, for live calls; the client's
    key for fair shares: engine.scheduler); the BEFORE rules run on `pool` (default: the
    loop's default executor).
    With `agent` None, or an agent without rules, the engine's deltas pass as they are."""
    rules = agent is not None and bool(agent.before) and not isinstance(messages, str)
    limit = getattr(getattr(engine, "config", None), "max_prompt_chars", MAX_RULE_CHARS)
    asked = messages
    if rules and source is None:
        asked = await asyncio.get_running_loop().run_in_executor(
            pool, agent.rewrite, messages, limit)
    source_given = source is not None
    if source is None:
        source = _generate(engine, asked, params, request_id, chat_template_kwargs, priority,
                           client)
    guard = agent.guard if agent is not None else None
    if guard is None or isinstance(messages, str):
        async with contextlib.aclosing(source) as stream:
            async for delta in stream:
                yield delta
        return
    current = [request_id]

    def stop() -> None:
        if abort is not None:
            abort()
        else:
            engine.abort(current[0])

    async def careful() -> AsyncIterator[Any]:
        current[0] = f"{request_id}-careful"
        if on_request is not None:
            on_request(current[0])
        again = asked  # a draft's source was decoding the rewritten messages already
        if rules and source_given:
            again = await asyncio.get_running_loop().run_in_executor(
                pool, agent.rewrite, messages, limit)
        async with contextlib.aclosing(_generate(
                engine, again, engine.careful_params(params), current[0],
                chat_template_kwargs, priority, client)) as stream:
            async for delta in stream:
                yield delta

    retry = careful if guard.retry and hasattr(engine, "careful_params") else None
    async with contextlib.aclosing(guard.wrap(
            source, abort=stop, record=record, first_block=calibrated(params, engine),
            messages=list(messages), retry=retry, pool=pool)) as stream:
        async for delta in stream:
            yield delta
