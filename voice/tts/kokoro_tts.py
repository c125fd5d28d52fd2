"""`PackagedKokoroTTSService`: a pipecat TTSService speaking with the packaged Kokoro-82M voice.

Contract: consumes text frames like any pipecat TTSService; pipecat's sentence aggregator hands
`run_tts` one sentence at a time, so the first sentence is synthesized (and heard) while the
engine drafts the rest. Each sentence goes through kokoro-onnx's `create_stream` (its phoneme
batches are synthesized in a worker thread, one ahead of playback, never on the event loop);
each batch becomes 200 ms TTSAudioRawFrames resampled from 24 kHz to the pipeline's rate.
TTSStarted/Stopped frames and TTFB metrics as pipecat's services do. An interruption abandons
the stream (the batch in flight finishes, no further one starts).

Unlike pipecat's KokoroTTSService (which loads the model per service, i.e. per call, from
files it may download), the model is loaded once per process (voice.tts.kokoro_model) and is
never downloaded. `stop_frame_timeout_s` defaults to 20 s: on a slow CPU a sentence can take
several seconds, and pipecat's 3 s default would close the audio context before its audio.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

import numpy as np
import soxr
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

from diffvoice.voice.tts.kokoro_model import DEFAULT_VOICE, SAMPLE_RATE, shared_kokoro
from diffvoice.voice.tts.text import speakable, voiceable

CHUNK_SECS = 0.2
STOP_FRAME_TIMEOUT_S = 20.0


class PackagedKokoroTTSService(TTSService):
    def __init__(self, *, voice: str = DEFAULT_VOICE, lang: str = "en-us", speed: float = 1.0,
                 threads: int = 0, **kwargs) -> None:
        kwargs.setdefault("stop_frame_timeout_s", STOP_FRAME_TIMEOUT_S)
        super().__init__(push_start_frame=True, push_stop_frames=True,
                         settings=TTSSettings(model="kokoro-82m-int8", voice=voice,
                                              language=None), **kwargs)
        self._kokoro = shared_kokoro(threads)
        if voice not in self._kokoro.get_voices():
            raise ValueError(f"kokoro voice {voice!r} is not one of {self._kokoro.get_voices()}")
        self._voice, self._lang, self._speed = voice, lang, speed

    def can_generate_metrics(self) -> bool:
        return True

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if not voiceable(text):
            return
        text = speakable(text)
        try:
            await self.start_tts_usage_metrics(text)
            stream = self._kokoro.create_stream(text, voice=self._voice, lang=self._lang,
                                                speed=self._speed)
            async for samples, rate in stream:
                await self.stop_ttfb_metrics()
                audio = np.asarray(samples, dtype=np.float32)
                if rate != self.sample_rate:
                    audio = soxr.resample(audio, rate, self.sample_rate)
                pcm = (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16).tobytes()
                step = int(self.sample_rate * CHUNK_SECS) * 2
                for offset in range(0, len(pcm), step):
                    yield TTSAudioRawFrame(audio=pcm[offset: offset + step],
                                           sample_rate=self.sample_rate, num_channels=1,
                                           context_id=context_id)
        except Exception as e:  # a broken voice must not take the call down
            yield ErrorFrame(error=f"kokoro synthesis failed: {e}")
        finally:
            await self.stop_ttfb_metrics()


__all__ = ["SAMPLE_RATE", "PackagedKokoroTTSService"]
