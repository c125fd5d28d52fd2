"""`DraftManager`: one call's eager answer drafts, made while the caller is still speaking.

Contract:
* `propose(text)` starts a low-priority engine request (`engine.generate(..., draft=True)`) for
  the messages the real answer would use if the caller's turn ended with `text` (the call's
  context + `text` as the user message, the same system prompt), asked with the parameters the
  real answer would have (`params(messages)`: the call's tools and tool_choice too). A draft for
  the same normalised messages is kept; a different one replaces the current draft, which is
  aborted. Drafts collect their deltas in the background.
* `ready(text)`: the current draft answers `text` and has text to speak (or finished cleanly);
  `drafting(text)`: the current draft was made for `text` (running, done, or refused by a busy
  engine — then the answer is simply a normal request): nothing is gained by waiting.
* `take(messages, params)` is called by the LLM service when the turn ends: if the current draft
  was made for exactly these messages (normalised: case, punctuation, whitespace) and these
  parameters (a draft asked without the turn's tools is not its answer), it is promoted to
  a real request and returned — the caller streams `draft.stream()` instead of asking the engine
  again; otherwise it is aborted and None is returned. Either way the turn's draft accounting
  (`last_turn`: drafts started, draft used, extra engine passes of discarded drafts) is closed.
* `cancel(reason)` aborts the current draft (barge-in, a new user turn); `close()` aborts and
  awaits every draft task (disconnect), so no engine request outlives the call.
A refused or shed draft (engine under load) is simply not used. Knows nothing about audio,
frames or sockets.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from loguru import logger
from pipecat.turns.user_stop.eager_match_policy import NormalizedMatch

from diffvoice.voice.chat_messages import context_to_messages

_draft_counter = itertools.count(1)
UNUSABLE = ("shed", "abort", "refused", "error")


def normalise(text: str) -> str:
    """Case, punctuation and whitespace removed (pipecat's NormalizedMatch)."""
    return NormalizedMatch._normalize(text)


def messages_key(messages: list[dict]) -> tuple:
    return tuple((m["role"], normalise(m["content"])) for m in messages)


class Draft:
    """One speculative engine request and the deltas it has produced so far."""

    def __init__(self, request_id: str, messages: list[dict], text: str,
                 params: Any = None) -> None:
        self.request_id = request_id
        self.messages = messages
        self.params = params  # the SamplingParams it was asked with (tools included)
        self.key = messages_key(messages)
        self.text = text
        self.deltas: list[Any] = []  # engine Deltas, in order (text-bearing and the final one)
        self.done = False
        self.finish_reason: str | None = None
        self.passes = 0
        self.taken = False
        self.submitted = False  # handed to the engine (until then a take() needs no promote)
        self.t_started = time.time()
        self.t_first_text: float | None = None
        self.task: asyncio.Task | None = None
        self._changed = asyncio.Event()

    @property
    def usable(self) -> bool:
        return self.finish_reason not in UNUSABLE

    @property
    def ready(self) -> bool:
        return self.usable and (self.t_first_text is not None or self.done)

    def _push(self, delta: Any) -> None:
        self.deltas.append(delta)
        self.passes = max(self.passes, getattr(delta, "passes", 0))
        if delta.text and self.t_first_text is None:
            self.t_first_text = time.time()
        self._changed.set()

    def _end(self, reason: str | None) -> None:
        if not self.done:
            self.done = True
            self.finish_reason = self.finish_reason or reason
            self._changed.set()

    async def stream(self) -> AsyncIterator[Any]:
        """Every delta, buffered ones first, then live ones until the request finishes."""
        i = 0
        while True:
            while i < len(self.deltas):
                yield self.deltas[i]
                i += 1
            if self.done:
                return
            self._changed.clear()
            if i == len(self.deltas) and not self.done:
                await self._changed.wait()


@dataclass
class TurnDrafts:
    """Draft accounting for one user turn."""

    drafts: int = 0
    used: Draft | None = None
    discarded: list[Draft] = field(default_factory=list)

    @property
    def hit(self) -> bool:
        return self.used is not None

    @property
    def extra_passes(self) -> int:
        """Engine passes spent on drafts this turn that did not become the answer."""
        return sum(d.passes for d in self.discarded)


class DraftManager:
    def __init__(
        self,
        engine: Any,
        params: Any,
        *,
        get_context_messages: Callable[[], list[dict]],
        system_prompt: str | None,
        request_prefix: str = "voice",
        rewrite: Callable[[list[dict]], list[dict]] | None = None,
    ) -> None:
        self._engine = engine
        self._rewrite = rewrite  # the agent's BEFORE rules (agent.pipeline.Agent.rewrite)
        # SamplingParams, or params(context messages with the new user turn) -> SamplingParams:
        # what the real answer would be asked with (a call's tools and tool_choice)
        self._params = params
        self._get_context_messages = get_context_messages
        self._system_prompt = system_prompt
        self._prefix = request_prefix
        self.current: Draft | None = None
        self._turn = TurnDrafts()
        self.last_turn: TurnDrafts | None = None
        self._tasks: set[asyncio.Task] = set()

    def messages_for(self, text: str) -> list[dict]:
        context = [*self._get_context_messages(), {"role": "user", "content": text}]
        return context_to_messages(context, self._system_prompt)

    def propose(self, text: str) -> Draft | None:
        """Draft an answer to `text` unless the current draft already answers it."""
        if not normalise(text):
            return None
        messages = self.messages_for(text)
        key = messages_key(messages)
        if self.current is not None and self.current.key == key and self.current.usable:
            return self.current
        self.cancel("redraft")
        params = self._params
        if callable(params):
            params = params([*self._get_context_messages(), {"role": "user", "content": text}])
        draft = Draft(f"{self._prefix}-draft-{next(_draft_counter)}", messages, text, params)
        draft.task = asyncio.get_running_loop().create_task(
            self._run(draft), name=f"draft-{draft.request_id}")
        self._tasks.add(draft.task)
        draft.task.add_done_callback(self._tasks.discard)
        self.current = draft
        self._turn.drafts += 1
        logger.debug(f"draft {draft.request_id} for {text!r}")
        return draft

    def ready(self, text: str) -> bool:
        draft = self.current
        return draft is not None and draft.ready and draft.key == messages_key(
            self.messages_for(text))

    def drafting(self, text: str) -> bool:
        draft = self.current
        return draft is not None and draft.key == messages_key(self.messages_for(text))

    def take(self, messages: list[dict], params: Any = None) -> Draft | None:
        """The draft made for exactly `messages` (and, given, `params`: a draft asked without
        the turn's tools is not its answer), promoted to a real request; else None."""
        draft, self.current = self.current, None
        turn, self._turn = self._turn, TurnDrafts()
        self.last_turn = turn
        if (draft is not None and draft.usable and draft.key == messages_key(messages)
                and (params is None or draft.params == params)):
            # not handed to the engine yet (the agent's rewrite, a tool schema's preparation):
            # it goes in as a real request; promote() fails only if the engine shed it
            if draft.done or not draft.submitted or self._engine.promote(draft.request_id):
                draft.taken = True
                turn.used = draft
                return draft
        if draft is not None:
            self._discard(draft, turn)
        return None

    def cancel(self, reason: str) -> None:
        draft, self.current = self.current, None
        if draft is not None:
            logger.debug(f"draft {draft.request_id} cancelled ({reason})")
            self._discard(draft, self._turn)

    def abort_taken(self, draft: Draft) -> None:
        """The answer streamed from `draft` was interrupted: stop its engine request."""
        if not draft.done:
            self._engine.abort(draft.request_id)

    def _discard(self, draft: Draft, turn: TurnDrafts) -> None:
        turn.discarded.append(draft)
        if not draft.done:
            self._engine.abort(draft.request_id)  # the task ends on the engine's abort delta

    async def close(self, timeout_s: float = 5.0) -> None:
        """Abort every draft and wait for its task (disconnect): nothing outlives the call."""
        self.cancel("close")
        tasks = list(self._tasks)
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)

    async def _run(self, draft: Draft) -> None:
        from diffvoice.engine import EngineOverloaded  # DraftRefused is one

        try:
            asked = draft.messages
            if self._rewrite is not None:  # as the real answer would be asked (off the loop)
                asked = await asyncio.to_thread(self._rewrite, draft.messages)
            def still_draft() -> bool:  # asked by the engine when it takes the request in
                draft.submitted = True
                return not draft.taken

            async for delta in self._engine.generate(
                asked, draft.params, request_id=draft.request_id, draft=still_draft
            ):
                draft._push(delta)
                if delta.finished:
                    draft._end(delta.finish_reason)
        except EngineOverloaded as e:
            logger.debug(f"draft {draft.request_id} refused: {e}")
            draft._end("refused")
        except asyncio.CancelledError:
            draft._end("abort")
            raise
        except Exception as e:  # a failed draft only means answering normally
            logger.warning(f"draft {draft.request_id} failed: {e!r}")
            draft._end("error")
        finally:
            draft._end("abort")
