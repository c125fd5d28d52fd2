"""Turn ends decided on words *and* sound (voice.turn_end with voice.smart_turn), on speech made
here with espeak-ng (en-us, as the calibration in latency_bench.turn_signals speaks it: Smart
Turn's verdicts on espeak depend on the voice, "can I book a" sounds finished in its default
voice), in a real pipecat pipeline (drafter -> user aggregator -> LLM service on the
random-weight engine). The caller's audio frames reach the strategy as they do in a call; the
VAD's events and the transcripts are given (the tiny test Whisper hears gibberish). Paths:
a complete question ends at its pause; a pause mid-thought whose words were misheard as complete
does not end the turn when its sound says it is cut off; a one-word answer to the agent's
question ends at once, and waits the window when nothing was asked; and Smart Turn's verdicts
on this speech are what the rules assume. Barge-in with the sound on: tests/voice/
test_interruption.py (its server runs with smart_turn)."""

from __future__ import annotations

import numpy as np
import pytest
from pipecat.frames.frames import (
    InputAudioRawFrame,
    LLMFullResponseStartFrame,
    TranscriptionFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import SleepFrame, run_test
from test_drafting import CountingEngine, _pipeline
from voice_fixtures import scaled

from diffvoice.latency_bench.corpus import speech_only
from diffvoice.latency_bench.speakers import Speaker, Synth
from diffvoice.voice.smart_turn import SmartTurn
from diffvoice.voice.turn_end import TurnSignals

CHUNK = 640  # 20 ms at 16 kHz
SYNTH = Synth()
QUESTION = "What day would suit you?"


def _audio(pcm: bytes) -> list:
    return [InputAudioRawFrame(audio=pcm[i:i + CHUNK], sample_rate=16000, num_channels=1)
            for i in range(0, len(pcm), CHUNK)]


def _spoken(text: str) -> bytes:
    """`text` in espeak-ng's en-us voice at 150 wpm as the calibration speaks it
    (latency_bench.turn_signals: trimmed to its speech and fade), then the VAD's 0.2 s pause."""
    pcm = speech_only(SYNTH, Speaker("espeak", "en-us", 150), text)
    return pcm.tobytes() + bytes(int(0.2 * 16000) * 2)


def _said(text: str, heard: str | None = None) -> list:
    """One VAD segment of `text` spoken (its audio frames), then the VAD stop and the final
    transcript `heard` (default: the text)."""
    pcm = _spoken(text)
    return [VADUserStartedSpeakingFrame(), *_audio(pcm), SleepFrame(scaled(0.05)),
            VADUserStoppedSpeakingFrame(), TranscriptionFrame(heard or text, "u", "now")]


def _starts(down) -> int:
    return sum(isinstance(f, LLMFullResponseStartFrame) for f in down)


@pytest.fixture(scope="module")
def smart():
    """This module's own Smart Turn session and pool (not the process's shared one), so no
    other test's leftover work can delay a verdict these paths wait for."""
    return SmartTurn()


@pytest.fixture(scope="module")
def own_engine(tmp_path_factory):
    """This module's own random-weight engine (not the worker's shared `random_engine`): the
    turn ends here wait for a draft, which requests other tests left running would queue."""
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("ckpt") / "random-sdar", family="sdar")
    engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", max_running=8))
    engine.warmup()
    yield engine
    engine.close()


def test_smart_turn_hears_this_speech_as_the_rules_assume(smart):
    """The model's verdicts the paths below rely on (a change of model or of espeak-ng shows
    here first): a finished question sounds complete, a phrase cut off after "a" does not."""
    done, cut = _spoken("how much does a cleaning cost"), _spoken("can I book a")
    p_done = smart.predict(np.frombuffer(done, np.int16), 16000)
    p_cut = smart.predict(np.frombuffer(cut, np.int16), 16000)
    assert p_done >= 0.5 and p_cut < TurnSignals().veto, (p_done, p_cut)


async def test_a_complete_question_ends_at_its_pause(own_engine, smart):
    """The turn ends on the sound's verdict and the draft being ready ("fast"), not on the
    window. The window is long (6 s) so that a verdict or a draft slowed by a loaded machine
    (the engine is shared with the worker's other tests) still comes before it: the decision
    waits for both, and the window is what a late one would fall back to."""
    engine = CountingEngine(own_engine)
    pipeline, _, meaning = _pipeline(engine, window_secs=6.0, smart_turn=smart)
    frames = _said("how much does a cleaning cost") + [SleepFrame(scaled(6.2))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    assert _starts(down) == 1 and meaning.decisions == ["fast"], (
        meaning.decisions, meaning.waited_secs, meaning.sound, engine.__dict__)
    assert meaning.waited_secs[0] < 5.8  # at the verdict, before the window's end
    assert meaning.sound[0] is not None and meaning.sound[0] >= TurnSignals().veto


@pytest.mark.parametrize("with_sound", [True, False])
async def test_a_misheard_pause_mid_thought_waits_for_the_rest(own_engine, smart,
                                                           with_sound):
    """ "can I book a" misheard as "Can I know okay" (what the server's Whisper made of it,
    docs/latency/turn-taking.md): complete words, but it sounds cut off. With the sound the turn
    waits and the caller's next words join it; on words alone it is cut in two."""
    pipeline, _, meaning = _pipeline(CountingEngine(own_engine), window_secs=1.0,
                                     smart_turn=smart if with_sound else None)
    frames = (_said("can I book a", heard="Can I know okay") + [SleepFrame(0.6)]
              + _said("cleaning on friday") + [SleepFrame(scaled(1.5))])
    down, _ = await run_test(pipeline, frames_to_send=frames)
    if with_sound:
        assert _starts(down) == 1 and meaning.decisions == ["fast"], meaning.decisions
        assert meaning.sound[0] >= TurnSignals().veto  # ended on the whole question
    else:
        assert _starts(down) == 2 and meaning.decisions == ["fast", "fast"]


async def test_a_one_word_answer_to_the_agents_question_ends_at_once(own_engine):
    context = LLMContext(messages=[{"role": "user", "content": "can I book a cleaning"},
                                   {"role": "assistant", "content": QUESTION}])
    pipeline, _, meaning = _pipeline(
        CountingEngine(own_engine), window_secs=1.0, context=context,
        asked=lambda: context.get_messages()[-1]["content"])
    frames = _said("tuesday") + [SleepFrame(scaled(1.5))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    assert _starts(down) == 1 and meaning.decisions == ["fast"]
    assert meaning.waited_secs[0] < 0.5


async def test_one_word_with_no_question_asked_waits_the_window(own_engine):
    pipeline, _, meaning = _pipeline(CountingEngine(own_engine), window_secs=1.0)
    frames = _said("tuesday") + [SleepFrame(scaled(1.8))]
    down, _ = await run_test(pipeline, frames_to_send=frames)
    assert _starts(down) == 1 and meaning.decisions == ["window"]
    assert meaning.waited_secs[0] >= 0.75  # window 1.0 s from speech end = 0.8 s after the stop
