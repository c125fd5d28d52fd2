"""Speech the recogniser makes no words of (a one-word answer Whisper hears as nothing) is not
left unanswered: the STT says so (`UnheardSpeechFrame`, voice.asr.streaming_stt), the turn
strategy ends the empty turn after the window and the agent asks the caller to say it again
(voice.turn_end), once in a row, spoken by the real TTS and kept in the context as the agent's
question, so the caller's one-word answer to it ends the turn at once. Noise (no speech heard)
still gets nothing. Audio is espeak-ng speech made here, heard by the served Whisper tiny.en
(which makes nothing of espeak's "maria"); the turn-level tests send its verdict as a frame."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    TTSSpeakFrame,
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
from test_drafting import RANDOM_LLM, SYSTEM, CountingEngine
from voice_fixtures import scaled

from diffvoice.latency_bench.corpus import speech_only
from diffvoice.latency_bench.speakers import Speaker, Synth
from diffvoice.voice.asr.resolve import resolve_asr
from diffvoice.voice.asr.streaming_stt import UnheardSpeechFrame
from diffvoice.voice.frame_tap import FrameTap
from diffvoice.voice.llm_service import DiffusionLLMService
from diffvoice.voice.pipeline import _turn_strategies, last_question
from diffvoice.voice.transport import protocol
from diffvoice.voice.tts.espeak_tts import EspeakTTSService
from diffvoice.voice.turn_end import REPROMPT, MeaningTurnStopStrategy
from diffvoice.voice.turn_tracker import TurnTracker

CHUNK = 640  # 20 ms at 16 kHz
SYNTH = Synth()


def _said(word: str, gain: float = 1.0) -> bytes:
    pcm = speech_only(SYNTH, Speaker("espeak", "en-us", 150), word).astype(np.float32)
    return np.clip(pcm * gain, -32768, 32767).astype(np.int16).tobytes()


def _audio(pcm: bytes) -> list:
    return [InputAudioRawFrame(audio=pcm[i:i + CHUNK], sample_rate=16000, num_channels=1)
            for i in range(0, len(pcm), CHUNK)]


@pytest.fixture(scope="module")
def whisper():
    """The served recogniser: the packaged Whisper tiny.en, as `diffvoice serve` loads it."""
    asr = resolve_asr("whisper", "cpu")
    assert asr.kind == "whisper", asr.warnings
    return asr


async def _heard_by_stt(asr, pcm: bytes) -> list:
    """The STT alone, sent the VAD's frames around `pcm`: what it pushes downstream."""
    stt = asr.make_service()
    down = []

    async def tap(_name, frame, _direction):
        if isinstance(frame, UnheardSpeechFrame | TranscriptionFrame):
            down.append(frame)

    audio = bytes(3200) + pcm + bytes(9600)  # 0.1 s before, 0.3 s after
    sent = [VADUserStartedSpeakingFrame(), *_audio(audio),
            VADUserStoppedSpeakingFrame(stop_secs=0.2), SleepFrame(scaled(1.5))]
    await run_test(Pipeline([stt, FrameTap("stt", tap)]), frames_to_send=sent,
                   expected_down_frames=None)
    return down


async def test_speech_without_words_is_reported_unheard_and_quiet_sound_is_not(whisper):
    """espeak-ng's "maria" is one of the one-word answers tiny.en hears as nothing (at 16 and
    8 kHz alike); "tuesday" it hears."""
    down = await _heard_by_stt(whisper, _said("maria"))
    assert [type(f) for f in down] == [UnheardSpeechFrame], down
    assert down[0].peak_db > -35 and down[0].secs > 0.5
    assert await _heard_by_stt(whisper, _said("maria", gain=0.005)) == []  # too quiet: not
    heard = await _heard_by_stt(whisper, _said("tuesday"))  # words: a transcript, no verdict
    assert [type(f) for f in heard] == [TranscriptionFrame], heard


def _pipeline(engine, context: LLMContext, window_secs: float = 0.6):
    """The served wiring of the user side (voice.pipeline): the turn strategy, empty turns that
    never ask the LLM, the LLM, espeak TTS and the assistant aggregator."""
    llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=8,
                              sampling_overrides=RANDOM_LLM, request_prefix="t")
    meaning = MeaningTurnStopStrategy(window_secs=window_secs, stop_secs=0.2,
                                      asked=lambda: last_question(context))
    pair = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        user_turn_strategies=_turn_strategies(meaning), empty_user_turn=None))
    spoken, answers = [], []  # said without the LLM; the LLM's answers

    async def tap(_name, frame, _direction):
        if isinstance(frame, TTSSpeakFrame):
            spoken.append(frame.text)
        elif isinstance(frame, LLMFullResponseStartFrame):
            answers.append(frame)

    tts = EspeakTTSService()
    meaning.spoken, meaning.answers = spoken, answers
    return Pipeline([pair.user(), llm, FrameTap("llm", tap), tts, pair.assistant()]), meaning


def _spoke(pcm: bytes, *then) -> list:
    return [VADUserStartedSpeakingFrame(), *_audio(pcm), SleepFrame(scaled(0.05)),
            VADUserStoppedSpeakingFrame(), *then]


def _count(down, kind) -> int:
    return sum(isinstance(f, kind) for f in down)


async def test_unheard_speech_is_asked_again_once_and_the_answer_to_that_ends_at_once(
        random_engine):
    context = LLMContext(messages=[])
    pipeline, meaning = _pipeline(CountingEngine(random_engine), context)
    yes = _said("yes")
    frames = [
        *_spoke(yes, UnheardSpeechFrame(1, 0.8, -20.0)), SleepFrame(scaled(2.0)),
        # the answer to "say it again": one word, complete because the agent asked a question
        *_spoke(yes, TranscriptionFrame("Tuesday.", "u", "now")), SleepFrame(scaled(2.0)),
    ]
    down, _ = await run_test(pipeline, frames_to_send=frames, expected_down_frames=None)
    assert meaning.spoken == [REPROMPT]
    assert meaning.decisions == ["unheard", "fast"], meaning.decisions
    assert meaning.reprompts == 1
    assert _count(down, TTSAudioRawFrame) > 0  # the reprompt was spoken
    roles = [(m["role"], m["content"]) for m in context.messages]
    assert roles[0] == ("assistant", REPROMPT), roles  # the agent's question, as said
    assert ("user", "Tuesday.") in roles
    assert len(meaning.answers) == 1  # only the answer asked the LLM


async def test_unheard_twice_in_a_row_is_asked_once_and_words_reset_it(random_engine):
    context = LLMContext(messages=[])
    pipeline, meaning = _pipeline(CountingEngine(random_engine), context)
    yes = _said("yes")
    unheard = [*_spoke(yes, UnheardSpeechFrame(1, 0.8, -20.0)), SleepFrame(scaled(2.0))]
    words = [*_spoke(yes, TranscriptionFrame("What time do you open?", "u", "now")),
             SleepFrame(scaled(2.0))]
    down, _ = await run_test(pipeline, frames_to_send=unheard + unheard + words + unheard,
                             expected_down_frames=None)
    assert meaning.decisions == ["unheard", "unheard", "fast", "unheard"], meaning.decisions
    assert meaning.reprompts == 2  # not after the second in a row; again after the words
    assert meaning.spoken == [REPROMPT, REPROMPT]


async def test_words_after_unheard_speech_are_answered_not_asked_again(random_engine):
    """The caller went on within the window ("um" heard as nothing, then the question)."""
    context = LLMContext(messages=[])
    pipeline, meaning = _pipeline(CountingEngine(random_engine), context, window_secs=1.0)
    yes = _said("yes")
    frames = [*_spoke(yes, UnheardSpeechFrame(1, 0.8, -20.0)), SleepFrame(scaled(0.2)),
              *_spoke(yes, TranscriptionFrame("What time do you open?", "u", "now")),
              SleepFrame(scaled(2.0))]
    down, _ = await run_test(pipeline, frames_to_send=frames, expected_down_frames=None)
    assert meaning.decisions == ["fast"], meaning.decisions
    assert meaning.spoken == [] and len(meaning.answers) == 1


async def test_noise_without_words_or_speech_gets_nothing(random_engine):
    context = LLMContext(messages=[])
    pipeline, meaning = _pipeline(CountingEngine(random_engine), context)
    frames = [*_spoke(_said("yes", gain=0.005)), SleepFrame(scaled(1.5))]
    down, _ = await run_test(pipeline, frames_to_send=frames, expected_down_frames=None)
    assert meaning.decisions == []
    assert meaning.spoken == [] and len(meaning.answers) == 0


async def test_a_reprompt_is_a_turn_of_its_own_in_the_latency_records():
    from pipecat.frames.frames import OutputAudioRawFrame, UserStoppedSpeakingFrame

    events = []

    async def emit(event):
        events.append(event)

    clock = iter(float(t) for t in range(100, 200))
    tracker = TurnTracker(session_id="s", stop_secs=0.2, emit=emit, clock=lambda: next(clock))
    await tracker.on_frame("stt", VADUserStoppedSpeakingFrame())
    await tracker.on_frame("stt", UserStoppedSpeakingFrame())
    await tracker.on_frame("llm", TTSSpeakFrame(REPROMPT))
    await tracker.on_frame("out", OutputAudioRawFrame(audio=bytes(640), sample_rate=16000,
                                                      num_channels=1))
    (record,) = tracker.records
    assert record["reprompt"] is True and record["bot_text"] == REPROMPT
    assert record["llm_ttft_ms"] is None and record["server_ms"] is not None
    assert any(isinstance(e, protocol.Latency) and e.reprompt for e in events)
