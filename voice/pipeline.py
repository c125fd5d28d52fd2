"""Build one pipecat pipeline for one call: transport in -> ASR -> user turn (Silero VAD) ->
DiffusionLLMService -> TTS -> transport out -> assistant context.

Contract (stable; the telephony helper builds on it):

    build_pipeline(
        state: voice.state.AppState,          # shared engine, config, metrics, ASR/TTS factories
        transport: pipecat BaseTransport,     # browser (voice.transport.browser) or telephony
        *,
        session_id: str,
        on_latency: Callable[[dict], None] | None = None,
                                              # gets each per-turn latency record (a dict with the
                                              # fields of transport.protocol.Latency) after it was
                                              # written to the JSON-lines log and
                                              # state.metrics.observe_turn()
        on_event: Callable[[voice.transport.protocol.Event], Awaitable[None]] | None = None,
                                              # browser events: Transcript, BotText,
                                              # BotStartedSpeaking/Stopped, PlaybackFlush, Latency
        stop_secs: float | None = None,       # None -> state.config.stop_secs (VAD pause)
        eager_drafts: bool | None = None,     # None -> state.config.eager_drafts
        turn_window_secs: float | None = None,  # None -> state.config.turn_window_secs
        audio_in_sample_rate: int = 16000,    # what the transport's input frames carry
        audio_out_sample_rate: int | None = None,  # None -> the TTS's native rate
        caller: str | None = None,            # who the receptionist's bookings belong to
                                              # (agent.owner); None -> this session
        observe: Callable[[str, Frame, FrameDirection], Awaitable[None]] | None = None,
                                              # sees every frame at the stt/llm/tts/out taps,
                                              # after the turn tracker (a transport's events)
        before_llm: Sequence[FrameProcessor] = (),
                                              # processors between the user aggregator and
                                              # the LLM (e.g. a transport's response gate)
    ) -> CallParts                            # pipeline, worker, tracker, llm, turn end,
                                              # context, VAD (voice.call: what a call exposes)

Only voice.call.start_call calls it: a transport never assembles a call itself.

Turn end (voice.turn_end): the VAD reports pauses after `stop_secs`; the turn ends at once when
the transcript is complete (its words, the agent's last question, and with `smart_turn` the
sound of the turn: voice.smart_turn) and (with eager drafts) its draft is ready, else
`turn_window_secs` after the caller's end of speech. With eager drafts an EagerDrafter between
ASR and the user aggregator drafts answers from interim transcripts (voice.drafting).

voice.call runs the worker (start_call / Call.close); the transport owns the socket.
Interruption (caller speaks over the bot) is handled inside: engine request aborted, TTS
stopped, queued audio dropped, and `PlaybackFlush` sent through on_event (telephony serializers
turn pipecat's InterruptionFrame into their own "clear" message).

This module only wires processors together; it knows nothing about sockets or the wire
protocol's encoding.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import Frame, InputAudioRawFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import (
    LLMContextAggregatorPair,
    LLMUserAggregatorParams,
)
from pipecat.processors.filters.function_filter import FunctionFilter
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.transports.base_transport import BaseTransport
from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import (
    UserTurnStrategies,
    default_user_turn_start_strategies,
)

from diffvoice.agent.owner import session_owner
from diffvoice.voice.eager_drafter import EagerDrafter
from diffvoice.voice.frame_tap import FrameTap
from diffvoice.voice.llm_service import DiffusionLLMService
from diffvoice.voice.receptionist.setup import agent_of
from diffvoice.voice.smart_turn import shared_smart_turn
from diffvoice.voice.speech_vad import SpeechTrackingVAD
from diffvoice.voice.tool_ledger import ToolLedger
from diffvoice.voice.transport import protocol
from diffvoice.voice.transport.vad_aligned import WINDOW_SECS, VadAlignedInput
from diffvoice.voice.turn_end import MeaningTurnStopStrategy
from diffvoice.voice.turn_tracker import TurnTracker

OnLatency = Callable[[dict], None]
OnEvent = Callable[[protocol.Event], Awaitable[None]]
Observe = Callable[[str, Frame, Any], Awaitable[None]]  # (tap, frame, direction)


@dataclass
class CallParts:
    """What `build_pipeline` made for one call. Only `pipeline` and `worker` are required: a
    test's stand-in builder may return just those (as a tuple)."""

    pipeline: Pipeline
    worker: PipelineWorker
    tracker: TurnTracker | None = None
    llm: DiffusionLLMService | None = None
    turn_end: MeaningTurnStopStrategy | None = None
    context: LLMContext | None = None
    vad: Any = None  # SpeechTrackingVAD
    ledger: ToolLedger | None = None  # the receptionist's held bookings (voice.tool_ledger)

    @classmethod
    def of(cls, built) -> CallParts:
        return built if isinstance(built, CallParts) else cls(*built)


def _turn_strategies(meaning: MeaningTurnStopStrategy | None = None) -> UserTurnStrategies:
    if meaning is not None:
        stop = [meaning]
    else:
        # the VAD's stop_secs already is the silence window: end the turn as soon as the VAD
        # stopped and the (finalized) transcript is in
        stop = [SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)]
    return UserTurnStrategies(start=default_user_turn_start_strategies(), stop=stop)


def call_context(state) -> LLMContext:
    """A new call's empty context, with the receptionist's tools when the server has them."""
    receptionist = getattr(state, "receptionist", None)
    return (LLMContext(messages=[], tools=receptionist.tools_schema()) if receptionist
            else LLMContext(messages=[]))


def served_llm(state, **kwargs) -> DiffusionLLMService:
    """The LLM service a call answers with: ServeConfig's prompt and sampling, the state's
    overrides, the server's agent (agent.pipeline: the BEFORE and AFTER rules); `kwargs`:
    request_prefix, draft_context, ... (voice.warmup serves its warm-up answer through it)."""
    config = state.config
    return DiffusionLLMService(
        state.engine, system_prompt=config.system_prompt, max_new_tokens=config.max_new_tokens,
        steps_per_block=config.steps_per_block, sampling_overrides=state.llm_overrides,
        agent=agent_of(state), **kwargs)


def last_question(context: LLMContext) -> str | None:
    """The agent's last words in the call, if the last message is the agent's (the caller's
    next words may answer it)."""
    messages = context.get_messages()
    if not messages or messages[-1].get("role") != "assistant":
        return None
    content = messages[-1].get("content")
    return content if isinstance(content, str) else None


async def _not_caller_audio(frame: Frame) -> bool:
    return not isinstance(frame, InputAudioRawFrame)


def caller_audio_stop() -> FunctionFilter:
    """Drops the caller's audio frames after their last consumer (the user aggregator's VAD).

    pipecat passes every 20 ms input frame on down the whole pipeline; the LLM, TTS, output
    transport and taps after the user aggregator ignore them, and each hop costs a queue, a task
    switch and observer calls on the event loop: with 16 silent callers those hops alone kept
    the server's loop thread busy (docs/reliability.md).
    """
    return FunctionFilter(_not_caller_audio, filter_system_frames=True, name="caller-audio-stop",
                          enable_direct_mode=True)


def build_pipeline(
    state,
    transport: BaseTransport,
    *,
    session_id: str,
    on_latency: OnLatency | None = None,
    on_event: OnEvent | None = None,
    stop_secs: float | None = None,
    audio_in_sample_rate: int = 16000,
    audio_out_sample_rate: int | None = None,
    eager_drafts: bool | None = None,
    turn_window_secs: float | None = None,
    caller: str | None = None,
    observe: Observe | None = None,
    before_llm: Sequence[FrameProcessor] = (),
) -> CallParts:
    config = state.config
    stop_secs = config.stop_secs if stop_secs is None else float(stop_secs)
    eager_drafts = config.eager_drafts if eager_drafts is None else bool(eager_drafts)
    window = config.turn_window_secs if turn_window_secs is None else float(turn_window_secs)
    window = max(window, stop_secs)
    out_rate = audio_out_sample_rate or state.tts.sample_rate

    async def record_sink(record: dict) -> None:
        if state.replica_id is not None:
            record["replica"] = state.replica_id
        if state.latency_log is not None:
            try:
                state.latency_log.write(record)
            except Exception as e:  # a full disk must not end the call
                logger.warning(f"latency log write failed: {e!r}")
        state.metrics.observe_turn(record)
        logger.info(turn_line(record))
        if on_latency is not None:
            on_latency(record)

    # caller audio in frames of input_frame_ms (whole VAD windows; voice.transport.vad_aligned)
    transport_in = transport.input()
    if isinstance(transport_in, VadAlignedInput):
        window_ms = round(WINDOW_SECS * 1000)
        transport_in.windows_per_frame = getattr(config, "input_frame_ms", window_ms) // window_ms
    stt = state.asr.make_service()
    # records where speech ended; one shared ONNX session for every call (voice.vad)
    vad = SpeechTrackingVAD(params=VADParams(
        stop_secs=stop_secs, min_volume=getattr(config, "vad_min_volume", 0.5)))
    if isinstance(transport_in, VadAlignedInput):  # larger frames while the VAD lags behind
        transport_in.backlog = lambda: transport_in.pushed_secs - vad.received_secs
    receptionist = getattr(state, "receptionist", None)
    context = call_context(state)
    llm = served_llm(state, request_prefix=f"voice-{session_id}",
                     draft_context=context if eager_drafts else None)
    ledger = None
    if receptionist is not None:  # the appointment book's tools run inside this call,
        # as its caller: bookings belong to the transport's identity (agent.owner;
        # a phone number from Twilio's signed webhook, else this session), never to words;
        # a booking or cancellation holds until the caller hears it confirmed
        ledger = ToolLedger(receptionist.settle)
        receptionist.register(llm, caller=caller or session_owner(session_id), ledger=ledger)
    meaning = MeaningTurnStopStrategy(
        window_secs=window, stop_secs=stop_secs,
        speech_end=lambda: vad.last_speech_t, hearing_speech=lambda: vad.hearing_speech,
        silence_heard=lambda: vad.silence_secs,
        draft_ready=llm.drafts.drafting if llm.drafts is not None else None,
        asked=lambda: last_question(context),
        smart_turn=shared_smart_turn() if config.smart_turn else None,
    )  # fmt: skip
    aggregators = LLMContextAggregatorPair(
        context,
        user_params=LLMUserAggregatorParams(
            vad_analyzer=vad, user_turn_strategies=_turn_strategies(meaning),
            # a turn with no words never asks the LLM (pipecat's default gives it an English
            # instruction as a system message when the turn cut the bot off); speech heard
            # without words is asked again by the turn strategy itself (voice.turn_end)
            empty_user_turn=None,
        ),
    )
    tracker = TurnTracker(
        session_id=session_id, stop_secs=stop_secs, emit=on_event, record_sink=record_sink,
        speech_end=lambda: vad.last_speech_t, turn_info=llm.turn_info,
    )  # fmt: skip
    drafter = [EagerDrafter(llm.drafts, stable_secs=config.draft_stable_secs)] if eager_drafts \
        else []
    tts = state.tts.make_service()
    taps = [tracker.on_frame] + ([ledger.on_frame] if ledger is not None else []) + (
        [observe] if observe is not None else [])

    async def on_frame(where: str, frame: Frame, direction=FrameDirection.DOWNSTREAM) -> None:
        for tap in taps:
            await tap(where, frame, direction)

    pipeline = Pipeline(
        [
            transport.input(),
            stt,
            FrameTap("stt", on_frame),
            *drafter,
            aggregators.user(),
            caller_audio_stop(),
            *before_llm,
            llm,
            FrameTap("llm", on_frame),
            tts,
            FrameTap("tts", on_frame),
            transport.output(),
            FrameTap("out", on_frame),
            aggregators.assistant(),
        ]
    )
    worker = PipelineWorker(
        pipeline,
        params=PipelineParams(
            audio_in_sample_rate=audio_in_sample_rate,
            audio_out_sample_rate=out_rate,
            enable_metrics=True,
            enable_usage_metrics=True,
        ),
        idle_timeout_secs=None,
        enable_rtvi=False,
        # pipecat's TurnTrackingObserver (nothing here reads it; the TurnTracker taps do the
        # turn records) gets every frame push and process through a queue and a task of its
        # own: ~9% of the event loop's time with 32 callers (py-spy --gil, 32-caller soak)
        enable_turn_tracking=False,
        name=f"voice-{session_id}",
    )
    return CallParts(pipeline, worker, tracker=tracker, llm=llm, turn_end=meaning,
                     context=context, vad=vad, ledger=ledger)


def turn_line(record: dict) -> str:
    """The one INFO line a turn gets: who, what was heard and said, and where the time went."""

    def ms(key: str) -> str:
        value = record.get(key)
        return "-" if value is None else f"{value:.0f}"

    heard = (record.get("user_text") or "")[:80]
    said = (record.get("bot_text") or "")[:80]
    flags = "".join((" interrupted" if record.get("interrupted") else "",
                     " draft-hit" if record.get("draft_hit") else ""))
    return (f"turn {record.get('session_id')}#{record.get('turn')}: heard {heard!r} -> "
            f"said {said!r} | server {ms('server_ms')} ms (endpointing {ms('endpointing_ms')}, "
            f"asr {ms('asr_ms')}, llm {ms('llm_ttft_ms')}, tts {ms('tts_first_audio_ms')}){flags}")
