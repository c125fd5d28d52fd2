"""EspeakTTSService under pipecat's run_test: clause-level start, audio equal to espeak's own
synthesis, interruption-safe; plus the clause splitter against a simple reference."""

from __future__ import annotations

import random

import numpy as np
import pytest
from pipecat.frames.frames import (
    AggregatedTextFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from diffvoice.voice.tts.clause_aggregator import CLAUSE_PUNCTUATION, split_clauses
from diffvoice.voice.tts.espeak import Espeak
from diffvoice.voice.tts.espeak_tts import EspeakTTSService
from diffvoice.voice.tts.text import speakable

RATE = Espeak.shared().sample_rate


def _envelope(pcm: bytes, window: int = 220) -> np.ndarray:
    x = np.frombuffer(pcm, np.int16).astype(np.float64)
    x = x[: len(x) // window * window].reshape(-1, window)
    return np.sqrt((x**2).mean(axis=1))


class _Clock(BaseObserver):
    """Monotonic push times of the frames we care about."""

    def __init__(self, tts) -> None:
        super().__init__()
        self.tts = tts
        self.first_audio: float | None = None
        self.second_text: float | None = None

    async def on_push_frame(self, data: FramePushed) -> None:
        import time

        frame = data.frame
        if data.source is self.tts and isinstance(frame, TTSAudioRawFrame):
            self.first_audio = self.first_audio or time.monotonic()
        if data.destination is self.tts and isinstance(frame, LLMTextFrame):
            if frame.text.startswith(" open"):
                self.second_text = self.second_text or time.monotonic()


async def test_speaks_first_clause_before_the_rest_of_the_answer_arrives():
    tts = EspeakTTSService(sample_rate=RATE)
    clock = _Clock(tts)
    down, _ = await run_test(
        tts,
        frames_to_send=[
            LLMFullResponseStartFrame(),
            LLMTextFrame("Hello there, we"),
            SleepFrame(sleep=0.6),
            LLMTextFrame(" open at nine. Bye"),
            LLMFullResponseEndFrame(),
        ],
        observers=[clock],
        pipeline_params=PipelineParams(audio_out_sample_rate=RATE),
    )
    clauses = [f.text for f in down if type(f) is AggregatedTextFrame]
    assert clauses == ["Hello there,", "we open at nine.", "Bye"]
    assert clock.first_audio is not None and clock.second_text is not None
    assert clock.first_audio < clock.second_text  # spoke while the "LLM" was still writing

    kinds = [type(f) for f in down]
    assert kinds.index(TTSStartedFrame) < kinds.index(TTSAudioRawFrame)
    assert kinds.index(TTSStoppedFrame) > max(
        i for i, k in enumerate(kinds) if k is TTSAudioRawFrame
    )
    assert isinstance(down[-1], LLMFullResponseEndFrame)

    # the audio is what espeak says for the clauses, in order (espeak is not bit-exact from one
    # call to the next, so compare lengths and loudness envelopes)
    audio = b"".join(f.audio for f in down if isinstance(f, TTSAudioRawFrame))
    expected = b"".join(Espeak.shared().synthesize(c) for c in clauses)
    assert abs(len(audio) - len(expected)) < 0.01 * len(expected)
    n = min(len(audio), len(expected)) // 2
    env, ref = _envelope(audio[: 2 * n]), _envelope(expected[: 2 * n])
    assert np.corrcoef(env, ref)[0, 1] > 0.95
    assert all(f.sample_rate == RATE for f in down if isinstance(f, TTSAudioRawFrame))


async def test_resamples_to_pipeline_rate_and_skips_unspeakable_text():
    tts = EspeakTTSService()  # rate from the pipeline
    down, _ = await run_test(
        tts,
        frames_to_send=[
            LLMFullResponseStartFrame(),
            LLMTextFrame("\ufffd\ufffd\x07, "),  # undecodable bytes + control char only
            LLMTextFrame("Good morning."),
            LLMFullResponseEndFrame(),
        ],
        pipeline_params=PipelineParams(audio_out_sample_rate=16000),
    )
    audio_frames = [f for f in down if isinstance(f, TTSAudioRawFrame)]
    assert audio_frames and all(f.sample_rate == 16000 for f in audio_frames)
    samples = sum(len(f.audio) for f in audio_frames) // 2
    native = len(Espeak.shared().synthesize("Good morning.")) // 2
    assert abs(samples - native * 16000 / RATE) < 0.02 * 16000  # same speech, resampled
    assert np.abs(np.frombuffer(b"".join(f.audio for f in audio_frames), np.int16)).max() > 1000


def test_speakable():
    assert speakable("a\ufffdb\x00c\u200bd  e\n") == "ab c d e"


def test_voiceable_is_what_espeak_renders_as_audio():
    """`voiceable` (the LLM service's "did the caller hear anything" rule) agrees with espeak-ng:
    what it rejects espeak renders as at most a few ms of silence, what it accepts as speech."""
    from diffvoice.voice.tts.espeak import Espeak
    from diffvoice.voice.tts.text import voiceable

    espeak = Espeak.shared()
    rate = espeak.sample_rate
    for text in [", .", "...", "'", "-- ?", "?!", "ok", "3", "a, b.", "Sorry."]:
        seconds = len(espeak.synthesize(text, "en-us", 175, lambda: False)) / 2 / rate
        assert voiceable(text) == (seconds > 0.1), (text, seconds)
    assert not voiceable(" \u200b\ufffd ") and not voiceable("")


def _reference_clauses(text: str) -> list[str]:
    """Simple reference: cut after punctuation followed by whitespace or the end of the text."""
    out, cur = [], ""
    for i, ch in enumerate(text):
        cur += ch
        if ch in CLAUSE_PUNCTUATION and (i + 1 == len(text) or text[i + 1].isspace()):
            if any(c.isalnum() for c in cur):
                out.append(cur.strip())
                cur = ""
    return out, cur


@pytest.mark.parametrize("seed", range(6))
def test_split_clauses_matches_reference_on_random_text(seed):
    rng = random.Random(seed)
    words = ["we", "open", "3.50", "at", "nine", "1,000", "ok", "yes", "Mr", "no"]
    text = ""
    for _ in range(rng.randint(3, 30)):
        text += rng.choice(words) + rng.choice(["", "", ",", ".", "?", "!", ";"]) + " "
    text = text.rstrip()
    clauses, rest = split_clauses(text, chunk_end=True, max_chars=10_000)
    ref, ref_rest = _reference_clauses(text)
    assert clauses == ref
    assert rest.strip() == ref_rest.strip()
    # cutting the same text into random chunks gives the same clauses (engine deltas end on words)
    pieces, buf = [], ""
    tokens = text.split(" ")
    i = 0
    while i < len(tokens):
        n = rng.randint(1, 4)
        chunk = " ".join(tokens[i : i + n]) + (" " if i + n < len(tokens) else "")
        i += n
        got, buf = split_clauses(buf + chunk, chunk_end=True, max_chars=10_000)
        pieces += got
    assert pieces + ([buf.strip()] if buf.strip() else []) == ref + (
        [ref_rest.strip()] if ref_rest.strip() else []
    )


def test_split_clauses_long_text_without_punctuation():
    clauses, rest = split_clauses("one two three four five six", chunk_end=True, max_chars=10)
    assert len(clauses) >= 2 and all(len(c) <= 10 for c in clauses)
    assert " ".join(clauses + [rest.strip()]).split() == "one two three four five six".split()
    hard, rest = split_clauses("営業時間は九時から五時までです", chunk_end=True, max_chars=8)
    assert (
        all(len(c) <= 9 for c in hard) and "".join(hard) + rest == "営業時間は九時から五時までです"
    )
