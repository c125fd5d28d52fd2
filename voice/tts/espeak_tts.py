"""`EspeakTTSService`: a pipecat TTSService over espeak-ng (ctypes, `voice.tts.espeak`), the offline
default voice.

Contract: consumes pipecat text frames like any TTSService; speaks each clause as soon as
`ClauseTextAggregator` completes it (the first clause of an answer goes to the synthesizer while
the engine is still drafting the rest); emits TTSStartedFrame, TTSAudioRawFrame(s) at
`Espeak.sample_rate` resampled to the pipeline's output rate, TTSStoppedFrame, with TTFB
metrics. Synthesis runs in a worker thread (never on the event loop) and stops early when the
turn is interrupted.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncGenerator

import numpy as np
import soxr
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import TTSService

from diffvoice.voice.tts.clause_aggregator import ClauseTextAggregator
from diffvoice.voice.tts.espeak import Espeak
from diffvoice.voice.tts.text import speakable, voiceable

CHUNK_SECS = 0.2  # audio per TTSAudioRawFrame


class EspeakTTSService(TTSService):
    def __init__(
        self,
        *,
        voice: str = "en-us",
        rate_wpm: int = 175,
        max_clause_chars: int = 80,
        **kwargs,
    ) -> None:
        self._espeak = Espeak.shared()
        super().__init__(
            push_start_frame=True,
            push_stop_frames=True,
            sample_rate=kwargs.pop("sample_rate", None),
            settings=TTSSettings(model="espeak-ng", voice=voice, language=None),
            **kwargs,
        )
        self._voice = voice
        self._rate_wpm = rate_wpm
        # replace the sentence aggregator: speak at the first clause
        self._text_aggregator = ClauseTextAggregator(max_chars=max_clause_chars)
        self._cancel_events: set[threading.Event] = set()

    @property
    def native_sample_rate(self) -> int:
        return self._espeak.sample_rate

    def can_generate_metrics(self) -> bool:
        return True

    async def _handle_interruption(self, frame, direction) -> None:
        for event in list(self._cancel_events):
            event.set()
        await super()._handle_interruption(frame, direction)

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        if not voiceable(text):
            return
        text = speakable(text)
        cancel = threading.Event()
        self._cancel_events.add(cancel)
        try:
            await self.start_tts_usage_metrics(text)
            pcm = await asyncio.to_thread(
                self._espeak.synthesize, text, self._voice, self._rate_wpm, cancel.is_set
            )
            await self.stop_ttfb_metrics()
            if cancel.is_set() or not pcm:
                return
            native = self._espeak.sample_rate
            if native != self.sample_rate:
                # one-shot resampling of the whole clause: a streaming resampler would hold
                # back the clause's last ~60 ms until the next clause
                samples = np.frombuffer(pcm, dtype=np.int16)
                pcm = soxr.resample(samples, native, self.sample_rate).astype(np.int16).tobytes()
            step = int(self.sample_rate * CHUNK_SECS) * 2
            for offset in range(0, len(pcm), step):
                if cancel.is_set():  # interrupted while the clause's frames were going out
                    return
                yield TTSAudioRawFrame(
                    audio=pcm[offset : offset + step],
                    sample_rate=self.sample_rate,
                    num_channels=1,
                    context_id=context_id,
                )
        except asyncio.CancelledError:
            cancel.set()
            raise
        except Exception as e:  # a broken voice must not take the call down
            yield ErrorFrame(error=f"espeak-ng synthesis failed: {e}")
        finally:
            self._cancel_events.discard(cancel)
