"""The meaning turn-stop strategy in a real pipecat pipeline (drafter -> user aggregator ->
DiffusionLLMService on the random-weight engine): a pause inside a sentence ("what time, um,
... do you open on saturday") does not end the turn, a complete question with its draft ready
ends it at once, an incomplete one only after the full window; plus the completeness
heuristic on examples."""

from __future__ import annotations

import time

import pytest
from pipecat.frames.frames import (
    InterimTranscriptionFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.tests.utils import SleepFrame, run_test
from test_drafting import CountingEngine, _pipeline
from voice_fixtures import scaled

from diffvoice.voice.turn_end import TurnSignals, looks_complete


def _one_segment(text: str) -> list:
    """One VAD speech segment with its final transcript, then 1.5 s (scaled) of silence."""
    return [
        VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
        VADUserStoppedSpeakingFrame(), TranscriptionFrame(text, "u", "now"),
        SleepFrame(scaled(1.5)),
    ]  # fmt: skip


def _since_first_call(clock=time.monotonic):
    """A function of no arguments giving the seconds since it was first called (when the
    strategy first polls the fake VAD)."""
    start: list[float] = []

    def elapsed() -> float:
        if not start:
            start.append(clock())
        return clock() - start[0]

    return elapsed


@pytest.mark.parametrize(
    "text, complete",
    [
        ("what time do you open on saturday", True),
        ("What time do you open on Saturday?", True),
        ("where are you located", True),
        ("I need to cancel my appointment.", True),
        ("what time, um,", False),
        ("what time um", False),
        ("what time", False),
        ("how much", False),
        ("where exactly", False),
        ("where's the office", True),
        ("is there", False),
        ("how much does a cleaning cost", True),
        ("what time do you open on", False),
        ("can I book a", False),
        ("hello", False),
        ("Doo-o-o", False),
        ("Do-you", False),
        ("", False),
        ("how much is a cleaning and", False),
    ],
)
def test_looks_complete(text, complete):
    assert looks_complete(text) is complete


@pytest.mark.parametrize(
    "text, asked, complete",
    [
        ("tuesday", "What day would suit you?", True),
        ("Yes.", "Shall I book it?", True),
        ("maria", "May I have your name?", True),
        ("um", "What day would suit you?", False),  # a filler answers nothing
        ("the", "What day would suit you?", False),
        ("tuesday", "Your cleaning is booked.", False),  # not a question: no answer expected
        ("tuesday", None, False),
        ("next tuesday", None, True),  # two words: the words alone decide, as before
    ],
)
def test_a_one_word_answer_is_complete_only_after_a_question(text, asked, complete):
    assert looks_complete(text, asked) is complete


@pytest.mark.parametrize(
    "words, p, complete",
    [
        (True, None, True),  # no sound: the words decide
        (False, None, False),
        (True, 0.5, True),
        (True, 0.05, False),  # the sound says mid-thought: veto
        (False, 0.99, False),  # a sure sound never completes words that are not
    ],
)
def test_words_and_sound_combine(words, p, complete):
    assert TurnSignals(veto=0.2).complete(words, p) is complete
    assert TurnSignals(veto=None).complete(words, p) is words  # the veto turned off


async def test_a_pause_inside_a_sentence_does_not_end_the_turn(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, meaning = _pipeline(engine, window_secs=0.8)
    frames = [
        VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
        InterimTranscriptionFrame("what time um", "u", "now"), SleepFrame(scaled(0.1)),
        VADUserStoppedSpeakingFrame(), TranscriptionFrame("what time, um,", "u", "now"),
        SleepFrame(0.4),  # the caller pauses 0.2 s (VAD) + 0.4 s, then goes on
        VADUserStartedSpeakingFrame(), SleepFrame(scaled(0.1)),
        InterimTranscriptionFrame("do you open on saturday", "u", "now"),
        SleepFrame(scaled(0.2)),
        VADUserStoppedSpeakingFrame(), TranscriptionFrame("do you open on saturday", "u", "now"),
        SleepFrame(scaled(1.5)),
    ]  # fmt: skip
    down, _ = await run_test(pipeline, frames_to_send=frames)
    assert sum(isinstance(f, LLMFullResponseStartFrame) for f in down) == 1
    assert meaning.decisions == ["fast"]
    used = llm.last_answer.turn.used
    assert used is not None and used.text == "what time, um, do you open on saturday"


async def test_an_incomplete_turn_waits_for_the_full_window(random_engine):
    engine = CountingEngine(random_engine)
    pipeline, llm, meaning = _pipeline(engine, window_secs=0.6)
    frames = _one_segment("hello")
    down, _ = await run_test(pipeline, frames_to_send=frames)
    starts = [f for f in down if isinstance(f, LLMFullResponseStartFrame)]
    assert len(starts) == 1 and meaning.decisions == ["window"]
    # window 0.6 s from the end of speech = 0.4 s after the VAD stop (stop_secs 0.2)
    assert 0.4 <= meaning.waited_secs[0] < 0.4 + scaled(0.3)


async def test_speech_the_vad_has_not_confirmed_holds_the_turn_open(random_engine):
    """A caller who resumes late in the window (the VAD is STARTING: start_secs not reached)
    is not cut off: the window expires while the VAD hears speech, and the turn ends only once
    the analyser is quiet again."""
    engine = CountingEngine(random_engine)
    elapsed = _since_first_call()

    def hearing_speech() -> bool:  # the fake VAD hears unconfirmed speech for 0.6 s
        return elapsed() < 0.6

    pipeline, llm, meaning = _pipeline(engine, window_secs=0.4, hearing_speech=hearing_speech)
    frames = _one_segment("how much")
    await run_test(pipeline, frames_to_send=frames)
    # the window (0.2 s after the stop) expired while the VAD heard speech: held until quiet
    assert meaning.decisions == ["window"]
    assert 0.6 <= meaning.waited_secs[0] < 0.6 + scaled(0.3)


async def test_the_window_counts_from_the_last_speech_heard(random_engine):
    """A short "um" after the first pause that the VAD never confirmed still moves the end of
    speech: the window runs from it, not from the first VAD stop."""
    engine = CountingEngine(random_engine)
    elapsed = _since_first_call(time.time)

    def speech_end() -> float | None:  # a blip of speech 0.15 s after the stop
        since = elapsed()
        return time.time() - since + (0.15 if since >= 0.15 else -0.2)

    pipeline, llm, meaning = _pipeline(engine, window_secs=0.4, speech_end=speech_end)
    frames = _one_segment("what time")
    await run_test(pipeline, frames_to_send=frames)
    assert meaning.decisions == ["window"]
    # without the blip: 0.2 s after the stop; with it: 0.15 + window 0.4
    assert 0.55 <= meaning.waited_secs[0] < 0.55 + scaled(0.3)


async def test_a_lagging_vad_never_counts_silence_it_has_not_analysed(random_engine):
    """Under load the VAD may analyse audio late: the window is counted in the stream's
    silence (here heard at half the wall-clock rate), so the turn waits for it."""
    engine = CountingEngine(random_engine)
    elapsed = _since_first_call()

    def silence_heard() -> float:
        return 0.2 + elapsed() * 0.5  # 0.2 s at the VAD stop

    pipeline, llm, meaning = _pipeline(engine, window_secs=0.5, silence_heard=silence_heard)
    frames = _one_segment("how much")
    await run_test(pipeline, frames_to_send=frames)
    assert meaning.decisions == ["window"]
    # wall clock alone would end at 0.3 s after the stop; 0.3 s more silence takes 0.6 s here
    assert 0.6 <= meaning.waited_secs[0] < 0.6 + scaled(0.3)


async def test_a_stalled_vad_still_ends_a_turn_that_has_its_transcript(random_engine):
    """The VAD stops analysing after its stop (its stream-time silence never grows, as under a
    multi-second stall or when the caller's audio stops coming): with a transcript in, the turn
    ends transcript_timeout_secs after the wall-clock window instead of never."""
    engine = CountingEngine(random_engine)
    pipeline, llm, meaning = _pipeline(engine, window_secs=0.4, silence_heard=lambda: 0.2,
                                       transcript_timeout_secs=0.5)
    frames = _one_segment("how much")  # incomplete: only the window could end it
    await run_test(pipeline, frames_to_send=frames)
    assert meaning.decisions == ["late"]
    # speech ended 0.2 s before the stop: window at 0.2 s after it, + 0.5 s timeout
    assert 0.7 <= meaning.waited_secs[0] < 0.7 + scaled(0.4)
