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
* an overloaded engine (`EngineOverloaded`) gets a short spoken apology and a non-fatal error.
* eager drafts (`draft_context` given): `self.drafts` is the call's voice.drafting.DraftManager;
  at each LLMContextFrame a draft made for exactly these messages is streamed instead of a new
  engine request; `last_turn` says whether the answer came from a draft, how many drafts the
  turn cost and their extra engine passes. Interruption and disconnect cancel drafts.

Knows nothing about audio, sockets or the wire protocol.
"""

from __future__ import annotations

import asyncio
import itertools
import time
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
from pipecat.services.llm_service import LLMService
from pipecat.services.settings import LLMSettings

BUSY_REPLY = "Sorry, I'm handling too many calls right now. Please try again in a moment."

_request_counter = itertools.count(1)


def context_to_messages(messages: list[dict[str, Any]], system_prompt: str | None) -> list[dict]:
    """OpenAI-style context messages -> [{"role", "content": str}] for the engine's template.

    Multi-part contents keep their text parts; tool/function messages are dropped (the embedded
    model has no tool calling); "developer" becomes "system".
    """
    out: list[dict[str, str]] = []
    for message in messages:
        role = message.get("role")
        if role == "developer":
            role = "system"
        if role not in ("system", "user", "assistant"):
            continue
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(
                part.get("text", "") for part in content if isinstance(part, dict)
            ).strip()
        if not isinstance(content, str) or not content:
            continue
        out.append({"role": role, "content": content})
    if system_prompt and not (out and out[0]["role"] == "system"):
        out.insert(0, {"role": "system", "content": system_prompt})
    return out


class AnswerInfo:
    """How one answer was made: from a draft or not, the drafts its turn cost, engine passes.
    Filled in while the answer streams; `as_dict()` gives the latency record's fields."""

    def __init__(self, turn: Any = None) -> None:
        self.turn = turn  # voice.drafting.TurnDrafts, or None when drafts are off
        self.passes = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"answer_passes": self.passes}
        if self.turn is not None:
            out.update(draft_hit=self.turn.hit, drafts=self.turn.drafts,
                       extra_passes=self.turn.extra_passes,
                       draft_ready_t=self.turn.used.t_first_text if self.turn.used else None)
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
        draft_context: LLMContext | None = None,
        **kwargs,
    ) -> None:
        from engine import SamplingParams  # deferred: importing engine pulls in torch

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
        fields = {"max_new_tokens": max_new_tokens, "steps_per_block": steps_per_block}
        fields.update(sampling_overrides or {})  # overrides win (tests, benchmarks)
        self._params = SamplingParams(**fields)
        self._request_prefix = request_prefix
        self._on_request = on_request
        self._current_request_id: str | None = None
        self.drafts = None
        self.last_answer = AnswerInfo()
        if draft_context is not None:
            from voice.drafting import DraftManager

            self.drafts = DraftManager(
                engine, self._params, get_context_messages=draft_context.get_messages,
                system_prompt=system_prompt, request_prefix=request_prefix)

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

    async def _respond(self, context: LLMContext) -> None:
        from engine import EngineOverloaded

        request_id = f"{self._request_prefix}-{next(_request_counter)}"
        messages = context_to_messages(context.get_messages(), self._system_prompt)
        draft = self.drafts.take(messages) if self.drafts is not None else None
        answer = self.last_answer = AnswerInfo(
            self.drafts.last_turn if self.drafts is not None else None)
        if draft is not None:
            request_id = draft.request_id
        await self.push_frame(LLMFullResponseStartFrame())
        await self.start_processing_metrics()
        finished = False
        usage: LLMTokenUsage | None = None
        try:
            await self.start_ttfb_metrics()
            self._current_request_id = request_id
            if self._on_request:
                self._on_request(request_id)
            first = True
            started = time.perf_counter()
            source = (draft.stream() if draft is not None else
                      self._engine.generate(messages, self._params, request_id=request_id))
            async for delta in source:
                answer.passes = max(answer.passes, getattr(delta, "passes", 0))
                if first:
                    await self.stop_ttfb_metrics()
                    first = False
                if delta.text:
                    await self._push_llm_text(delta.text)
                if delta.finished:
                    finished = True
                    usage = LLMTokenUsage(
                        prompt_tokens=delta.prompt_tokens,
                        completion_tokens=delta.completion_tokens,
                        total_tokens=delta.prompt_tokens + delta.completion_tokens,
                    )
                    logger.debug(
                        f"{self}: {request_id} finished ({delta.finish_reason}) "
                        f"{delta.completion_tokens} tokens in {time.perf_counter() - started:.3f}s"
                    )
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
