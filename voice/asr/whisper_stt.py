"""`WhisperSTT`: pipecat segmented STT over one *shared* faster-whisper model.

pipecat's own WhisperSTTService loads a model per instance (per call); here the model is loaded
once at server start (`voice.asr.resolve`) and every session's service transcribes with it
from a worker thread (CTranslate2 runs `num_workers` transcriptions in parallel).
Decoding is greedy with a token cap, so a bad model cannot stall a turn.

Contract: on each VAD segment (pipecat's SegmentedSTTService buffers audio between
VADUserStarted/StoppedSpeakingFrame) yields one finalized TranscriptionFrame, or nothing when
the segment is silence/no text. Never runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import numpy as np
from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TranscriptionFrame
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import SegmentedSTTService
from pipecat.utils.time import time_now_iso8601

WHISPER_TTFS_P99_CPU = 1.5  # seconds, speech end -> transcript, used by pipecat's turn logic


class WhisperSTT(SegmentedSTTService):
    def __init__(
        self,
        model: Any,
        *,
        model_name: str,
        language: str | None = "en",
        no_speech_threshold: float | None = 0.6,
        max_new_tokens: int = 96,
        ttfs_p99_latency: float = WHISPER_TTFS_P99_CPU,
        **kwargs,
    ) -> None:
        super().__init__(
            settings=STTSettings(model=model_name, language=None),
            ttfs_p99_latency=ttfs_p99_latency,
            **kwargs,
        )
        self._model = model
        self._language = language
        self._no_speech_threshold = no_speech_threshold
        self._max_new_tokens = max_new_tokens

    @property
    def wants_wav_segments(self) -> bool:
        return False  # raw int16 PCM

    def can_generate_metrics(self) -> bool:
        return True

    def _transcribe(self, audio: np.ndarray) -> str:
        segments, _info = self._model.transcribe(
            audio,
            language=self._language,
            beam_size=1,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            max_new_tokens=self._max_new_tokens,
        )
        texts = []
        for segment in segments:  # lazy generator: consume it in this worker thread
            if (
                self._no_speech_threshold is not None
                and segment.no_speech_prob > self._no_speech_threshold
            ):
                continue
            texts.append(segment.text.strip())
        return " ".join(t for t in texts if t)

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        await self.start_processing_metrics()
        samples = np.frombuffer(audio, dtype=np.int16).astype(np.float32) / 32768.0
        try:
            text = await asyncio.to_thread(self._transcribe, samples)
        except Exception as e:
            yield ErrorFrame(f"whisper transcription failed: {e}")
            return
        finally:
            await self.stop_processing_metrics()
        if text:
            logger.debug(f"{self}: transcript [{text}]")
            yield TranscriptionFrame(text, self._user_id, time_now_iso8601(), None)
