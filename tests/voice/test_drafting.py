"""Eager drafts in a real pipecat pipeline (EagerDrafter -> user aggregator with the meaning
turn-stop strategy -> DiffusionLLMService) against the real random-weight engine, driven with
InterimTranscriptionFrames as a streaming recogniser pushes them (pipecat run_test):

* a draft made from a stable interim is used when the final transcript matches: its text is the
  answer and the engine saw exactly one request for the turn (the draft), none afterwards;
* a draft whose text the final transcript contradicts is aborted and the answer is a fresh
  request;
* interruption and disconnect (CancelFrame) abort drafts; the engine has no request left.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from pipecat.frames.frames import (
    CancelFrame,
    InterimTranscriptionFrame,
    InterruptionFrame,
    LLMContextFrame,
    LLMTextFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.tests.utils import SleepFrame, run_test
from pipecat.turns.user_start import VADUserTurnStartStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from voice_fixtures import RANDOM_LLM, scaled

from diffvoice.voice.asr.streaming_stt import StreamingResult
from diffvoice.voice.drafting import normalise
from diffvoice.voice.eager_drafter import EagerDrafter
from diffvoice.voice.llm_service import DiffusionLLMService
from diffvoice.voice.turn_end import MeaningTurnStopStrategy

SYSTEM = "Answer in one short sentence."


class CountingEngine:
    """The real engine, with every generate() call recorded ([request id, draft flag]; a
    callable flag is recorded as the engine's answer when it asks)."""

    def __init__(self, engine) -> None:
        self._engine = engine
        self.requests: list[tuple[str, bool]] = []
        self.model_name = engine.model_name

    def generate(self, messages, params=None, request_id=None, *, draft=False):
        entry = [request_id, None if callable(draft) else draft]
        self.requests.append(entry)
        if callable(draft):  # a draft taken before the engine took it in goes in as real
            ask = draft

            def draft():
                entry[1] = ask()
                return entry[1]
        return self._engine.generate(messages, params, request_id, draft=draft)

    def __getattr__(self, name):
        return getattr(self._engine, name)


def _pipeline(engine, window_secs=0.8, stop_secs=0.2, context=None, stable_secs=0.05,
              **strategy_kwargs):
    context = context if context is not None else LLMContext(messages=[])
    llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM, request_prefix="t",
                              draft_context=context)
    meaning = MeaningTurnStopStrategy(window_secs=window_secs, stop_secs=stop_secs,
                                      draft_ready=llm.drafts.ready, **strategy_kwargs)
    pair = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=UserTurnStrategies(start=[VADUserTurnStartStrategy()],
                                                stop=[meaning])))
    drafter = EagerDrafter(llm.drafts, stable_secs=stable_secs)
    return Pipeline([drafter, pair.user(), llm]), llm, meaning


def _speak(interims, final, pause=0.3):
    frames = [VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1))]  # the ASR needs audio
    for text in interims:
        frames += [InterimTranscriptionFrame(text, "u", "now"), SleepFrame(scaled(pause))]
    frames += [VADUserStoppedSpeakingFrame(), TranscriptionFrame(final, "u", "now")]
    return frames


async def _wait_idle(engine, within=10.0):
    deadline = time.monotonic() + scaled(within)
    while engine.active_request_ids():
        assert time.monotonic() < deadline, f"engine still busy: {engine.active_request_ids()}"
        await asyncio.sleep(0.02)


def _answer(down) -> str:
    return "".join(f.text for f in down if isinstance(f, LLMTextFrame))


async def test_draft_from_a_stable_interim_is_the_answer_when_the_final_matches(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, meaning = _pipeline(engine)
    frames = _speak(["what time", "what time do you open on saturday"],
                    "What time do you open on Saturday?") + [SleepFrame(scaled(1.5))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    await _wait_idle(random_engine)
    drafts = [rid for rid, is_draft in engine.requests if is_draft]
    assert len(engine.requests) == len(drafts) >= 1, "no request besides drafts"
    used = llm.last_answer.turn.used
    assert used is not None and used.request_id == drafts[-1]
    assert normalise(used.text) == "what time do you open on saturday"
    # the answer the client got is exactly the draft's text, streamed from its deltas
    assert _answer(down) == "".join(d.text for d in used.deltas) and _answer(down)
    info = llm.last_answer.as_dict()
    assert info["draft_hit"] is True and info["drafts"] == len(drafts)
    assert meaning.decisions == ["fast"]  # a complete question with its draft ready


async def test_interim_draft_is_discarded_when_the_final_transcript_differs(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, _ = _pipeline(engine)
    frames = _speak(["where is the office located"],
                    "Where is the dentist near the station?") + [SleepFrame(scaled(1.5))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    await _wait_idle(random_engine)
    turn = llm.last_answer.turn
    assert [normalise(d.text) for d in turn.discarded] == ["where is the office located"]
    assert all(d.done and d.finish_reason in ("abort", "stop", "length") for d in turn.discarded)
    # the final transcript was drafted at the pause; that draft, not the stale one, answered
    assert normalise(turn.used.text) == "where is the dentist near the station"
    assert _answer(down) == "".join(d.text for d in turn.used.deltas)
    assert turn.drafts == 2 and not [r for r, is_draft in engine.requests if not is_draft]


async def test_a_draft_for_other_messages_is_aborted_and_the_answer_is_a_new_request(
        random_engine):
    engine = CountingEngine(random_engine)
    context = LLMContext(messages=[])
    llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM, request_prefix="t",
                              draft_context=context)
    stale = llm.drafts.propose("are you open on sunday")
    asked = LLMContext(messages=[{"role": "user", "content": "Are you open on Monday?"}])
    down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(asked)])
    await _wait_idle(random_engine)
    assert [is_draft for _, is_draft in engine.requests] == [True, False]
    assert stale.done and llm.last_answer.turn.discarded == [stale] and _answer(down)
    assert llm.last_answer.as_dict()["draft_hit"] is False


def _booking_tools():
    from pipecat.adapters.schemas.function_schema import FunctionSchema
    from pipecat.adapters.schemas.tools_schema import ToolsSchema

    return ToolsSchema(standard_tools=[FunctionSchema(
        name="book", description="Book a visit", properties={"day": {"type": "string"}},
        required=["day"])])


async def test_a_call_with_tools_drafts_with_them_and_its_draft_is_the_answer(random_engine):
    """A call with tools (the receptionist's, on every voice call) drafts with those tools, so
    the draft is the turn's answer: one engine request, the draft's."""
    engine = CountingEngine(random_engine)
    context = LLMContext(messages=[], tools=_booking_tools())
    pipeline, llm, _ = _pipeline(engine, context=context)
    frames = _speak(["what time do you open on saturday"],
                    "What time do you open on Saturday?") + [SleepFrame(scaled(1.5))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    await _wait_idle(random_engine)
    used = llm.last_answer.turn.used
    assert used is not None and [t["function"]["name"] for t in used.params.tools] == ["book"]
    assert [rid for rid, _ in engine.requests] == [used.request_id]  # nothing asked again


async def test_a_draft_asked_without_the_turns_tools_is_not_its_answer(random_engine):
    """A draft made before the call had tools is not the answer of a turn that has them, and the
    turn says so (no draft hit)."""
    engine = CountingEngine(random_engine)
    context = LLMContext(messages=[])
    llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM, request_prefix="t",
                              draft_context=context)
    stale = llm.drafts.propose("are you open on monday")
    context.set_tools(_booking_tools())
    context.add_message({"role": "user", "content": "Are you open on Monday?"})
    down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(context)])
    await _wait_idle(random_engine)
    assert [is_draft for _, is_draft in engine.requests] == [True, False]
    assert llm.last_answer.turn.discarded == [stale]
    assert llm.last_answer.as_dict()["draft_hit"] is False


async def test_a_draft_taken_before_the_engine_took_it_in_is_handed_over_as_real(random_engine):
    """The turn can end before a draft reaches the engine (its tool schemas are still being
    prepared): it is still the answer, and the engine takes it in as a real request."""
    engine = CountingEngine(random_engine)
    llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=16,
                              sampling_overrides=RANDOM_LLM, request_prefix="t",
                              draft_context=LLMContext(messages=[]))
    draft = llm.drafts.propose("are you open on monday")  # its task has not run yet
    taken = llm.drafts.take(llm.drafts.messages_for("are you open on monday"), draft.params)
    assert taken is draft and not draft.submitted
    deltas = [d async for d in draft.stream()]
    assert deltas[-1].finished and deltas[-1].finish_reason in ("stop", "length")
    assert engine.requests == [[draft.request_id, False]]  # handed over as a real request


def test_promote_reaches_a_request_handed_over_but_not_taken_in():
    from types import SimpleNamespace

    from diffvoice.engine import Engine

    pending = SimpleNamespace(request_id="a", draft=True)
    fake = SimpleNamespace(_lock=threading.Lock(), _pending=[pending],
                           scheduler=SimpleNamespace(promote=lambda rid: False))
    assert Engine.promote(fake, "a") and pending.draft is False
    assert not Engine.promote(fake, "b")  # unknown: the scheduler's answer


@pytest.mark.parametrize("at_pause", [True, False])
async def test_an_interim_heard_at_the_callers_pause_is_drafted_at_once(random_engine, at_pause):
    """The recogniser hears the caller's pause before the VAD ends the segment: that interim is
    what the turn says if it ends there, so its draft starts at once, not after the stable
    wait (here longer than the whole exchange); another interim waits."""
    engine = CountingEngine(random_engine)
    pipeline, llm, _ = _pipeline(engine, stable_secs=scaled(30.0))
    proposed, propose = [], llm.drafts.propose
    llm.drafts.propose = lambda text: (proposed.append(text), propose(text))[1]
    heard = StreamingResult(stable="", audio_secs=1.2, passes=2, segment=1, at_pause=at_pause)
    frames = [VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
              InterimTranscriptionFrame("what time do you open on saturday", "u", "now",
                                        result=heard),
              SleepFrame(scaled(0.3))]
    await run_test(pipeline, frames_to_send=frames)
    drafts = [rid for rid, is_draft in engine.requests if is_draft]
    assert len(drafts) == (1 if at_pause else 0)
    assert proposed == (["what time do you open on saturday"] if at_pause else [])
    await _wait_idle(random_engine)


async def test_interruption_cancels_the_draft(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, _ = _pipeline(engine)
    frames = [VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
              InterimTranscriptionFrame("can i book a cleaning for friday", "u", "now"),
              SleepFrame(scaled(0.3)), InterruptionFrame(), SleepFrame(scaled(0.5))]
    await run_test(pipeline, frames_to_send=frames)
    drafts = [rid for rid, is_draft in engine.requests if is_draft]
    assert len(drafts) == 1 and llm.drafts.current is None
    await _wait_idle(random_engine)


async def test_disconnect_cancels_drafts_and_no_engine_request_outlives_the_call(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, _ = _pipeline(engine)
    frames = [VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
              InterimTranscriptionFrame("how much does a cleaning cost", "u", "now"),
              SleepFrame(scaled(0.2)), CancelFrame()]
    await run_test(pipeline, frames_to_send=frames, send_end_frame=False)
    assert [is_draft for _, is_draft in engine.requests] == [True]
    assert not llm.drafts._tasks, "draft tasks must be awaited at disconnect"
    assert not random_engine.active_request_ids()
