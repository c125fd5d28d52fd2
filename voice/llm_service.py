"""`DiffusionLLMService`: a pipecat LLMService over the shared in-process diffusion `Engine`.

Contract:
* consumes `LLMContextFrame`; pushes `LLMFullResponseStartFrame`, one `LLMTextFrame` per engine
  delta that carries text (the engine commits whole words, a block at a time), then
  `LLMFullResponseEndFrame` — also when the request fails or is cancelled;
* TTFB metrics (request -> first delta), TTFAT, processing and token-usage metrics;
* never blocks the event loop: `engine.generate()` is an async iterator fed by the engine's own
  worker thread, so many sessions' requests batch together inside one engine;
* cancels its engine request on interruption (pipecat cancels the frame-processing task, which
  closes the generator and aborts the request), on EndFrame/CancelFrame (disconnect) and on
  cleanup, and also calls `engine.abort(request_id)` explicitly, so a slot is never leaked;
* a short-answer system prompt is prepended unless the context already starts with one; the
  token budget and denoising passes come from the constructor (ServeConfig).
* function calling as pipecat's LLM services do: the context's tools (and tool_choice) go to
  the engine's constrained tool-call mode; a decoded call is handed to `run_function_calls`
  (handlers registered with `register_function`, `FunctionCallParams`); pipecat's context
  aggregator stores the call and its result and re-prompts this service, which then speaks the
  outcome (after `tool_calls_per_turn` results in one user turn, tool_choice is "none", so a
  turn never loops on calls). Barge-in during a call follows `cancel_on_interruption`.
  `last_answer.tool_call` names the call an answer made and `last_answer.after_tool` says an
  answer is a call's re-prompt (the turn tracker counts both as one answer);
* an overloaded engine (`EngineOverloaded`) gets a short spoken apology and a non-fatal error.
* the agent (`agent=` an agent.pipeline.Agent, e.g. `Agent.for_model(model_dir)` for the
  shipped receptionist; None: the model's replies as they are): every answer goes through
  agent.pipeline.serve - the agent's BEFORE rules hear the caller's message as the model was
  trained to be asked, and its AFTER rules replace an answer whose first block the engine
  committed unsure, or (whole-reply mode) that is not well-formed, by the clarifying question
  before anything is spoken (`last_clarify` records why). `clarify=` a guard alone is the AFTER
  rules without the BEFORE rules.
* eager drafts (`draft_context` given): `self.drafts` is the call's voice.drafting.DraftManager;
  at each LLMContextFrame a draft made for exactly these messages is streamed instead of a new
  engine request; `last_turn` says whether the answer came from a draft, how many drafts the
  turn cost and their extra engine passes. Interruption and disconnect cancel drafts.

Knows nothing about audio, sockets or the wire protocol.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMContextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
)
from pipecat.metrics.metrics import LLMTokenUsage
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.llm_service import FunctionCallFromLLM, LLMService
from pipecat.services.settings import LLMSettings
from pipecat.utils.types import is_given

from diffvoice.agent import pipeline
from diffvoice.agent.guard import ClarifyRecord
from diffvoice.agent.pipeline import Agent
from diffvoice.voice.chat_messages import context_to_messages
from diffvoice.voice.drafting import DraftManager
from diffvoice.voice.tts.text import voiceable

BUSY_REPLY = "Sorry, I'm handling too many calls right now. Please try again in a moment."
# spoken when the model's answer to a final transcript has nothing a voice can say (it stopped at
# once, or gave only punctuation, which espeak-ng and Kokoro render as no audio):
# a caller who hears silence cannot tell a dead line from a thinking agent
EMPTY_REPLY = "Sorry, I didn't catch that. Could you say it again?"

_request_counter = itertools.count(1)


class AnswerInfo:
    """How one answer was made: from a draft or not, the drafts its turn cost, engine passes.
    Filled in while the answer streams; `as_dict()` gives the latency record's fields."""

    def __init__(self, turn: Any = None) -> None:
        self.turn = turn  # voice.drafting.TurnDrafts, or None when drafts are off
        self.passes = 0
        self.tool_call: str | None = None  # the tool this answer called (set before its end)
        self.after_tool = False  # the context ends with a tool result: the call's re-prompt

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer_passes": self.passes}
        if self.turn is not None:
            out.update(draft_hit=self.turn.hit, drafts=self.turn.drafts,
                       extra_passes=self.turn.extra_passes,
                       draft_ready_t=self.turn.used.t_first_text if self.turn.used else None,
                       draft_started_t=self.turn.used.t_started if self.turn.used else None)
        return out


class DiffusionLLMService(LLMService):
    def __init__(
        self,
        engine: Any,
        *,
        system_prompt: str | None,
        max_new_tokens: int = 48,
        steps_per_block: int = 4,
        sampling_overrides: dict[str, Any] | None = None,
        request_prefix: str = "voice",
        on_request: Callable[[str], None] | None = None,
        tool_calls_per_turn: int = 1,
        draft_context: LLMContext | None = None,
        agent: Any = None,
        clarify: Any = None,
        **kwargs,
    ) -> None:
        from diffvoice.engine import SamplingParams  # deferred: importing engine pulls in torch

        settings = LLMSettings(
            model=getattr(engine, "model_name", "diffusion"),
            system_instruction=system_prompt,
            temperature=None,
            max_tokens=max_new_tokens,
            top_p=None,
            top_k=None,
            frequency_penalty=None,
            presence_penalty=None,
            seed=None,
            filter_incomplete_user_turns=False,
            user_turn_completion_config=None,
        )
        super().__init__(settings=settings, **kwargs)
        self._engine = engine
        self._system_prompt = system_prompt
        # tools a client declared and executes itself (voice.realtime: chat-format dicts, with
        # the schema whole), offered beside the context's; their calls go to a catch-all handler
        self.client_tools: tuple[dict, ...] = ()
        self.client_tool_choice: Any = None  # overrides the context's tool_choice when set
        fields = {"max_new_tokens": max_new_tokens, "steps_per_block": steps_per_block}
        fields.update(sampling_overrides or {})  # overrides win (tests, benchmarks)
        self._params = SamplingParams(**fields)
        self._request_prefix = request_prefix
        self._on_request = on_request
        self._current_request_id: str | None = None
        if tool_calls_per_turn < 0:
            raise ValueError(f"tool_calls_per_turn must be >= 0, got {tool_calls_per_turn}")
        self._tool_calls_per_turn = tool_calls_per_turn
        if agent is None and clarify is not None:
            agent = Agent(guard=clarify)
        self._agent = agent  # agent.pipeline.Agent or None
        self.last_clarify = None  # its ClarifyRecord for the latest answer (with a guard)
        self.drafts = None
        self.last_answer = AnswerInfo()
        if draft_context is not None:
            self.drafts = DraftManager(  # asked as the turn's answer would be (its tools too)
                engine, lambda messages: self.params_for(draft_context, messages),
                get_context_messages=draft_context.get_messages,
                system_prompt=system_prompt, request_prefix=request_prefix,
                rewrite=agent.rewrite if agent is not None and agent.before else None)

    @property
    def system_prompt(self) -> str | None:
        return self._system_prompt

    @system_prompt.setter
    def system_prompt(self, text: str | None) -> None:
        """The instructions the next answers get (a Realtime session's `instructions`)."""
        self._system_prompt = text

    @property
    def max_new_tokens(self) -> int:
        return self._params.max_new_tokens

    @max_new_tokens.setter
    def max_new_tokens(self, n: int) -> None:
        self._params = dataclasses.replace(self._params, max_new_tokens=int(n))

    def turn_info(self) -> AnswerInfo:
        """The answer now starting (called by the turn tracker at LLMFullResponseStartFrame)."""
        return self.last_answer

    @property
    def current_request_id(self) -> str | None:
        return self._current_request_id

    def can_generate_metrics(self) -> bool:
        return True

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame) and self.drafts is not None:
            self.drafts.cancel("interruption")
        if isinstance(frame, LLMContextFrame):
            await self._respond(frame.context)
        else:
            await self.push_frame(frame, direction)

    async def stop(self, frame: EndFrame) -> None:
        self._abort_current()
        await self._close_drafts()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame) -> None:
        self._abort_current()
        await self._close_drafts()
        await super().cancel(frame)

    async def cleanup(self) -> None:
        self._abort_current()
        await self._close_drafts()
        await super().cleanup()

    async def _close_drafts(self) -> None:
        if self.drafts is not None:
            await self.drafts.close()

    def _abort_current(self) -> None:
        request_id, self._current_request_id = self._current_request_id, None
        if request_id is not None:
            try:
                self._engine.abort(request_id)
            except Exception as e:  # abort of a finished request is harmless
                logger.debug(f"{self}: abort({request_id}) -> {e!r}")

    def _started(self, request_id: str) -> None:
        """serve() started an engine request for this answer (the careful retry's is a second
        one): it is the one to abort."""
        self._current_request_id = request_id

    def params_for(self, context: LLMContext, messages: list[dict] | None = None):
        """The service's SamplingParams plus the context's tools and tool_choice (if any), for
        the context's messages (or `messages`: a draft's, with the user turn not yet in it)."""
        tools = context.tools
        own = (list(self.get_llm_adapter().to_provider_tools_format(tools))
               if is_given(tools) and tools and tools.standard_tools else [])
        if not own and not self.client_tools:
            return self._params
        fields = {"tools": tuple(own) + tuple(self.client_tools)}
        choice = (self.client_tool_choice if self.client_tool_choice is not None
                  else context.tool_choice)
        if is_given(choice) and choice is not None:
            fields["tool_choice"] = choice
        # a voice turn makes at most `tool_calls_per_turn` calls, then says the outcome
        messages = context.get_messages() if messages is None else messages
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"),
                        default=-1)
        results = sum(1 for m in messages[last_user + 1:] if m.get("role") == "tool")
        if results >= self._tool_calls_per_turn:
            fields["tool_choice"] = "none"
        return dataclasses.replace(self._params, **fields)

    async def _respond(self, context: LLMContext) -> None:
        from diffvoice.engine import EngineOverloaded

        request_id = f"{self._request_prefix}-{next(_request_counter)}"
        messages = context_to_messages(context.get_messages(), self._system_prompt)
        params = self.params_for(context)
        call = None
        draft = self.drafts.take(messages, params) if self.drafts is not None else None
        answer = self.last_answer = AnswerInfo(
            self.drafts.last_turn if self.drafts is not None else None)
        last = context.get_messages()[-1:]
        answer.after_tool = bool(last) and last[0].get("role") == "tool"
        if draft is not None:
            request_id = draft.request_id
        await self.push_frame(LLMFullResponseStartFrame())
        await self.start_processing_metrics()
        finished = False
        spoke = False  # any text a voice renders as audio pushed for this turn
        reason = None
        usage: LLMTokenUsage | None = None
        try:
            await self.start_ttfb_metrics()
            self._current_request_id = request_id
            if self._on_request:
                self._on_request(request_id)
            first = True
            started = time.perf_counter()
            guarded = self._agent is not None and self._agent.guard is not None
            self.last_clarify = ClarifyRecord() if guarded else None
            source = pipeline.serve(  # the agent's rules around the model (agent.pipeline)
                self._agent, self._engine, messages, params, request_id=request_id,
                record=self.last_clarify, source=draft.stream() if draft is not None else None,
                abort=self._abort_current, on_request=self._started)
            async for delta in source:
                answer.passes = max(answer.passes, getattr(delta, "passes", 0))
                if first:
                    await self.stop_ttfb_metrics()
                    first = False
                if delta.text:
                    spoke = spoke or voiceable(delta.text)
                    await self._push_llm_text(delta.text)
                if getattr(delta, "tool_call", None) is not None:
                    call = delta.tool_call
                if delta.finished:
                    finished = True
                    reason = delta.finish_reason
                    usage = LLMTokenUsage(
                        prompt_tokens=delta.prompt_tokens,
                        completion_tokens=delta.completion_tokens,
                        total_tokens=delta.prompt_tokens + delta.completion_tokens,
                    )
                    logger.debug(
                        f"{self}: {request_id} finished ({delta.finish_reason}) "
                        f"{delta.completion_tokens} tokens in {time.perf_counter() - started:.3f}s"
                    )
            if call is not None:  # pipecat runs the handler; its result re-prompts us
                answer.tool_call = call["name"]  # the turn tracker keeps the turn open
                await self.run_function_calls([FunctionCallFromLLM(
                    context=context, tool_call_id=f"call_{uuid.uuid4().hex[:24]}",
                    function_name=call["name"], arguments=json.loads(call["arguments"]))])
            elif not spoke:  # a final transcript that gets no answer must never be silent
                logger.warning(f"{self}: {request_id} produced no text to speak "
                               f"(finish_reason={reason}); asking the caller to repeat")
                await self._push_llm_text(EMPTY_REPLY)
        except EngineOverloaded as e:
            await self.push_error(error_msg=f"engine overloaded: {e}", exception=e)
            await self._push_llm_text(BUSY_REPLY)
        except asyncio.CancelledError:
            logger.debug(f"{self}: {request_id} cancelled (interruption or disconnect)")
            raise
        except Exception as e:
            await self.push_error(error_msg=f"diffusion engine error: {e}", exception=e)
        finally:
            if not finished:
                self._abort_current()
            self._current_request_id = None
            if usage is not None:
                await self.start_llm_usage_metrics(usage)
            await self.stop_processing_metrics()
            await self.push_frame(LLMFullResponseEndFrame())
