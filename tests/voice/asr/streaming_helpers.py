"""Drive a streaming STT service with audio the way the voice pipeline does: 20 ms
InputAudioRawFrames paced in real time (scaled), VAD frames either from pipecat's real Silero
VAD in the user aggregator (broadcast upstream, as in voice.pipeline) or sent explicitly."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
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

from diffvoice.voice.frame_tap import FrameTap
from diffvoice.voice.pipeline import _turn_strategies

RATE = 16000
CHUNK = 320  # 20 ms


@dataclass
class Heard:
    """What the tap between the STT and the user aggregator saw, with arrival times."""

    frames: list[tuple[float, Frame]] = field(default_factory=list)

    async def __call__(self, _name, frame, _direction) -> None:
        if isinstance(
            frame,
            (
                InterimTranscriptionFrame,
                TranscriptionFrame,
                VADUserStartedSpeakingFrame,
                VADUserStoppedSpeakingFrame,
            ),
        ):
            self.frames.append((time.monotonic(), frame))

    def of(self, kind) -> list[Frame]:
        return [f for _, f in self.frames if type(f) is kind]

    def order(self) -> list[str]:
        return [type(f).__name__ for _, f in self.frames]


def audio_frames(pcm: bytes, pace: float = 1.0) -> list[Frame]:
    """20 ms audio frames, each followed by a SleepFrame of 20 ms * pace (0 = no pacing)."""
    out: list[Frame] = []
    for start in range(0, len(pcm), CHUNK * 2):
        out.append(InputAudioRawFrame(pcm[start : start + CHUNK * 2], RATE, 1))
        if pace > 0:
            out.append(SleepFrame(sleep=0.02 * pace))
    return out


def tone(secs: float, amplitude: float = 0.3, freq: float = 220.0) -> bytes:
    """A loud harmonic signal standing in for speech where only its energy matters."""
    t = np.arange(int(secs * RATE)) / RATE
    wave = amplitude * np.sin(2 * np.pi * freq * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (np.clip(wave, -1, 1) * 32767).astype(np.int16).tobytes()


def silence(secs: float) -> bytes:
    return bytes(int(secs * RATE) * 2)


async def run_with_silero(stt, pcm: bytes, *, stop_secs: float = 0.3, pace: float = 1.0):
    """stt -> tap -> user aggregator running pipecat's Silero VAD (as voice.pipeline wires it).
    Returns what the tap heard. The EndFrame at the end lets the last final arrive."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADParams

    heard = Heard()
    vad = SileroVADAnalyzer(params=VADParams(stop_secs=stop_secs))
    aggregators = LLMContextAggregatorPair(
        LLMContext(messages=[]),
        user_params=LLMUserAggregatorParams(
            vad_analyzer=vad, user_turn_strategies=_turn_strategies()
        ),
    )
    pipeline = Pipeline([stt, FrameTap("stt", heard), aggregators.user()])
    await run_test(pipeline, frames_to_send=audio_frames(pcm, pace), expected_down_frames=None)
    return heard


async def run_with_vad_frames(stt, parts: list[tuple[str, bytes | float]], pace: float = 1.0):
    """parts: ("audio", pcm) | ("start", 0) | ("stop", stop_secs) | ("sleep", secs), in order;
    the STT alone, VAD frames sent downstream. Returns what the tap heard."""
    heard = Heard()
    frames: list[Frame] = []
    for kind, value in parts:
        if kind == "audio":
            frames += audio_frames(value, pace)
        elif kind == "start":
            frames.append(VADUserStartedSpeakingFrame())
        elif kind == "stop":
            frames.append(VADUserStoppedSpeakingFrame(stop_secs=float(value)))
        elif kind == "sleep":
            frames.append(SleepFrame(sleep=float(value)))
    pipeline = Pipeline([stt, FrameTap("stt", heard)])
    await run_test(pipeline, frames_to_send=frames, expected_down_frames=None)
    return heard
