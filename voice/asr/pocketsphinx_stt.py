"""`PocketsphinxSTT`: the fallback recognizer, pocketsphinx's bundled en-us model (CPU, offline).

Used when no faster-whisper model can be found on disk. Accuracy on open speech is poor (it
is a 2010s HMM recognizer with a general language model), but it always starts, so the demo
never dies for lack of weights. Decoders are not thread-safe and take ~0.4 s to build, so a
`DecoderPool` shared by all sessions hands one decoder to each transcription.

Contract: like `voice.asr.whisper_stt.WhisperSTT`, one finalized TranscriptionFrame per VAD segment,
decoded in a worker thread.
"""

from __future__ import annotations

import asyncio
import queue
from collections.abc import AsyncGenerator

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TranscriptionFrame
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.utils.time import time_now_iso8601

POCKETSPHINX_TTFS_P99_CPU = 1.0


class DecoderPool:
    """Thread-safe pool of pocketsphinx Decoders (16 kHz, bundled en-us model)."""

    def __init__(self, size: int = 1, **decoder_kwargs) -> None:
        self._kwargs = {"samprate": 16000, "loglevel": "FATAL", **decoder_kwargs}
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(size):
            self._free.put(self._new())

    def _new(self):
        from pocketsphinx import Decoder

        return Decoder(**self._kwargs)

    def transcribe(self, pcm: bytes) -> str:
        try:
            decoder = self._free.get_nowait()
        except queue.Empty:
            decoder = self._new()
        try:
            decoder.start_utt()
            decoder.process_raw(pcm, full_utt=True)
            decoder.end_utt()
            hyp = decoder.hyp()
            return hyp.hypstr.strip() if hyp is not None else ""
        finally:
            self._free.put(decoder)


class PocketsphinxSTT(SegmentedSTTService):
    def __init__(self, pool: DecoderPool, **kwargs) -> None:
        super().__init__(
            settings=STTSettings(model="pocketsphinx-en-us", language=None),
            ttfs_p99_latency=POCKETSPHINX_TTFS_P99_CPU,
            trailing_silence_secs=0.2,
            **kwargs,
        )
        self._pool = pool

    @property
    def wants_wav_segments(self) -> bool:
        return False

    def can_generate_metrics(self) -> bool:
        return True

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        if self.sample_rate != 16000:
            yield ErrorFrame(
                f"pocketsphinx needs 16 kHz input, pipeline runs at {self.sample_rate}"
            )
            return
        await self.start_processing_metrics()
        try:
            text = await asyncio.to_thread(self._pool.transcribe, audio)
        except Exception as e:
            yield ErrorFrame(f"pocketsphinx transcription failed: {e}")
            return
        finally:
            await self.stop_processing_metrics()
        if text:
            logger.debug(f"{self}: transcript [{text}]")
            yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), None)
