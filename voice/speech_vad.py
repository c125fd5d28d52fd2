"""`SpeechTrackingVAD`: pipecat's Silero VAD that also says *when* speech ended in the stream.

Contract: behaves exactly like `SileroVADAnalyzer` (same states, same frames upstream), and
additionally keeps, per analysed 512-sample window the VAD counts as speaking (voice confidence
>= `params.confidence` and volume >= `params.min_volume`, Silero's own test):
* `last_speech_pos_s`: the stream position (seconds of caller audio since the call began) where
  that window ends;
* `last_speech_t`: the wall-clock time (time.time()) that audio position arrived — the arrival
  time of the analysed buffer minus the audio received after the window's end.
So at a VAD stop `last_speech_t` is the caller's end of speech as the audio shows it (within one
32 ms window), `silence_secs` the silence analysed since then (stream time), `speech_since(t)`
tells whether speech-like audio came after `t` and
`hearing_speech` whether the analyser is in any state but QUIET (e.g. STARTING: speech the VAD
has not confirmed yet, start_secs not reached). Thread-safe for these readings: the analysis runs in
pipecat's executor thread and only ever replaces floats.
"""

from __future__ import annotations

import time

from pipecat.audio.vad.vad_analyzer import VADState

from diffvoice.voice.lag_watch import LagWatch
from diffvoice.voice.vad import SharedSileroVAD


class SpeechTrackingVAD(SharedSileroVAD):  # one ONNX session for every call (voice.vad)
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.last_speech_t: float | None = None
        self.last_speech_pos_s: float | None = None
        self._received = 0  # samples handed to the analyzer so far
        self._analysed = 0  # samples whose windows were analysed
        self._arrival_t = 0.0
        self._confidence = 0.0
        self._lag = LagWatch("VAD", self)

    def _run_analyzer(self, buffer: bytes) -> VADState:
        self._arrival_t = time.time()
        self._received += len(buffer) // 2
        self._lag.stream(self._received, self.sample_rate or 16000)
        return super()._run_analyzer(buffer)

    def voice_confidence(self, buffer) -> float:
        confidence = super().voice_confidence(buffer)
        self._analysed += len(buffer) // 2
        self._confidence = confidence
        return confidence

    def _get_smoothed_volume(self, audio: bytes) -> float:
        # called right after voice_confidence for the same window: the VAD's own "speaking"
        # test is confidence >= params.confidence and volume >= params.min_volume
        volume = super()._get_smoothed_volume(audio)
        if self._confidence >= self.params.confidence and volume >= self.params.min_volume:
            rate = self.sample_rate or 16000
            self.last_speech_pos_s = self._analysed / rate
            self.last_speech_t = self._arrival_t - (self._received - self._analysed) / rate
        return volume

    def speech_since(self, t: float) -> bool:
        return self.last_speech_t is not None and self.last_speech_t > t

    @property
    def silence_secs(self) -> float | None:
        """Seconds of analysed audio since the last speech window (stream time, so a VAD that
        lags behind the caller under load never counts silence it has not heard yet)."""
        if self.last_speech_pos_s is None:
            return None
        return self._analysed / (self.sample_rate or 16000) - self.last_speech_pos_s

    @property
    def received_secs(self) -> float:
        """Caller audio handed to the analyser so far (stream time)."""
        return self._received / (self.sample_rate or 16000)

    @property
    def hearing_speech(self) -> bool:
        """The analyser is not QUIET: speech it has not confirmed (STARTING) or still hears."""
        return self._vad_state is not VADState.QUIET
