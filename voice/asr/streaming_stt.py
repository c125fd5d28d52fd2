"""`StreamingSegmentSTT`: base pipecat STT service for recognisers that transcribe *while* the
caller speaks, one VAD segment at a time.

Contract (shared by voice.asr.pocketsphinx_stt and voice.asr.whisper_stt):
- A segment is the audio between a VADUserStartedSpeakingFrame and the next
  VADUserStoppedSpeakingFrame (in pipecat 1.14 the user aggregator runs the VAD and broadcasts
  these frames upstream, so the STT sees them after the audio; `pre_roll_secs` of audio from
  before the start frame is kept, as pipecat's SegmentedSTTService does).
- Within a segment the service pushes `InterimTranscriptionFrame`s — the cumulative text of the
  segment so far, only when it changed — and, after the VAD stop, exactly one
  `TranscriptionFrame` (finalized=True) when the segment has text. `result` on both frames is
  a `StreamingResult` (stable prefix, audio heard, pass count). A segment with no text that was
  loud and long enough to be speech (`is_unheard_speech`) gets an `UnheardSpeechFrame` instead:
  the caller said something the recogniser made no words of (voice.turn_end asks them again).
- One worker task per call, started at StartFrame, handles segments strictly in order; blocking
  recognition runs in the ASR thread pool, never on the event loop. CancelFrame (hang-up) or
  cleanup cancels the worker and sets `abandoned`, so no ASR task outlives its call; work already
  running in a thread finishes there and its result is dropped. EndFrame finishes the open
  segment's final first (bounded by `final_timeout_secs`).
- Interruptions (the caller talking over the bot) do not drop the caller's audio: they are
  the caller's words.

Subclasses implement `async _run_segment(segment) -> str` (the final text), calling
`await self._push_interim(segment, text, stable)` as hypotheses change. `segment.loud_until`
(end of the last chunk above the energy threshold, in samples) tells them where speech was heard.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncGenerator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from loguru import logger
from pipecat.frames.frames import (
    CancelFrame,
    DataFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    StartFrame,
    TranscriptionFrame,
    UserAudioRawFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.stt_service import STTService
from pipecat.utils.time import time_now_iso8601

from diffvoice.voice.lag_watch import LagWatch

T = TypeVar("T")

# Recognition work for every call runs here, not in asyncio's default pool (which TTS and others
# share): a final pass waiting for a budget slot must not starve unrelated to_thread calls.
ASR_EXECUTOR = ThreadPoolExecutor(max_workers=32, thread_name_prefix="diffvoice-asr")

LOUD_FLOOR = 10 ** (-55 / 20)  # RMS below -55 dBFS is never speech
LOUD_RATIO = 10 ** (-26 / 20)  # a chunk 26 dB below the segment's peak counts as a pause
LOUD_SPEECH = 10 ** (-35 / 20)  # a segment this loud (and long) with no text was speech unheard
SLOW_FINAL_SECS = 1.5  # a final transcript later than this after the VAD stop is logged (INFO)


@dataclass(frozen=True)
class StreamingResult:
    stable: str  # confirmed prefix (never retracted within the segment)
    audio_secs: float  # audio of the segment this text is based on
    passes: int  # recognition passes run for the segment so far
    segment: int  # segment number within the call, from 1
    # the pass heard the caller pause after all the speech so far: the text is what the turn
    # says if it ends at this pause (voice.eager_drafter drafts it at once)
    at_pause: bool = False


@dataclass
class UnheardSpeechFrame(DataFrame):
    """A VAD segment that sounded like speech gave no words (`is_unheard_speech`)."""

    segment: int = 0  # segment number within the call
    secs: float = 0.0  # its audio, pre-roll and the VAD's stop included
    peak_db: float = 0.0  # its loudest 20 ms, dBFS


def is_unheard_speech(segment: Segment, text: str) -> bool:
    """No words from a segment at least -35 dBFS at its loudest and over half a second long
    (pre-roll and the VAD's stop included): what a caller who got no answer left in the logs
    (issue 12 soak: one-word answers Whisper heard as nothing)."""
    return not text and segment.peak_rms >= LOUD_SPEECH and \
        segment.samples > segment.sample_rate // 2


class Segment:
    """Audio of one VAD segment, growing while the caller speaks. Event-loop side only."""

    def __init__(self, index: int, sample_rate: int, pre_roll: bytes) -> None:
        self.index = index
        self.sample_rate = sample_rate
        self.audio = bytearray()
        self.closed = False
        self.stop_secs = 0.0
        self.loud_until = 0  # samples
        self.peak_rms = 0.0
        self.passes = 0
        self.closed_t: float | None = None  # monotonic time of the close (the VAD stop)
        self.last_interim = ""
        self.last_interim_at_pause = False
        self._changed = asyncio.Event()
        self.append(pre_roll)

    @property
    def samples(self) -> int:
        return len(self.audio) // 2

    def append(self, pcm: bytes) -> None:
        if not pcm:
            return
        self.audio += pcm
        chunk = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype=np.int16)
        if chunk.size:
            rms = float(np.sqrt(np.mean((chunk.astype(np.float32) / 32768.0) ** 2)))
            self.peak_rms = max(self.peak_rms, rms)
            if rms >= max(LOUD_FLOOR, LOUD_RATIO * self.peak_rms):
                self.loud_until = self.samples
        self._changed.set()

    def close(self, stop_secs: float) -> None:
        self.closed = True
        self.closed_t = time.monotonic()
        self.stop_secs = stop_secs
        self._changed.set()

    def pcm(self, samples: int | None = None) -> bytes:
        return bytes(self.audio if samples is None else self.audio[: samples * 2])

    async def wait_changed(self, within_secs: float | None) -> None:
        """Until new audio arrives or the segment closes (or `within_secs` seconds pass)."""
        if self.closed:
            return
        self._changed.clear()
        try:
            await asyncio.wait_for(self._changed.wait(), within_secs)
        except TimeoutError:
            pass


class StreamingSegmentSTT(STTService):
    def __init__(
        self, *, pre_roll_secs: float = 1.0, final_timeout_secs: float = 10.0, **kwargs
    ) -> None:
        super().__init__(**kwargs)
        if not 0.0 <= pre_roll_secs <= 5.0:
            raise ValueError(f"pre_roll_secs must be in [0, 5], got {pre_roll_secs}")
        self._pre_roll_secs = pre_roll_secs
        self._final_timeout_secs = final_timeout_secs
        self._ring = bytearray()
        self._current: Segment | None = None
        self._segment_count = 0
        self._queue: asyncio.Queue[Segment | None] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self.abandoned = threading.Event()  # set when the call ends: threads drop their work
        self._lag = LagWatch("ASR", self)

    # ---- subclass API -------------------------------------------------------------------------
    async def _run_segment(self, segment: Segment) -> str:
        raise NotImplementedError

    async def _in_thread(
        self, fn: Callable[[], T], on_abandon: Callable[[asyncio.Future], None] | None = None
    ) -> T:
        """Run blocking `fn` in the ASR pool. If this task is cancelled meanwhile, the thread
        runs to its end in the background; its future is then passed to `on_abandon`."""
        future = asyncio.get_running_loop().run_in_executor(ASR_EXECUTOR, fn)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if on_abandon is not None:
                future.add_done_callback(on_abandon)
            raise

    async def _push_interim(self, segment: Segment, text: str, stable: str = "",
                            at_pause: bool = False) -> None:
        """Push the segment's interim text when it changed, or when a pass at a pause heard it
        again (the same text, now known to be what the turn says if it ends here)."""
        text = text.strip()
        if not text or (text == segment.last_interim
                        and (not at_pause or segment.last_interim_at_pause)):
            return
        segment.last_interim = text
        segment.last_interim_at_pause = at_pause
        await self.push_frame(
            InterimTranscriptionFrame(
                text, self._user_id, time_now_iso8601(), None,
                result=self._result(segment, stable, at_pause),
            )
        )

    def _result(self, segment: Segment, stable: str, at_pause: bool = False) -> StreamingResult:
        return StreamingResult(
            stable=stable,
            audio_secs=segment.samples / segment.sample_rate,
            passes=segment.passes,
            segment=segment.index,
            at_pause=at_pause,
        )

    # ---- pipecat plumbing ---------------------------------------------------------------------
    def can_generate_metrics(self) -> bool:
        return True

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame, None]:
        yield None  # unused: audio is consumed by process_audio_frame per segment

    async def start(self, frame: StartFrame):
        await super().start(frame)
        self.abandoned.clear()
        if self._worker is None:
            self._worker = self.create_task(self._work(), name=f"{self}::asr_worker")

    async def stop(self, frame: EndFrame):
        if self._current is not None:
            self._close_segment(0.0)
        if self._worker is not None:
            await self._queue.put(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), self._final_timeout_secs)
            except TimeoutError:
                logger.warning(f"{self}: final transcript not ready at end of call; dropped")
            await self._cancel_worker()
        await super().stop(frame)

    async def cancel(self, frame: CancelFrame):
        await self._cancel_worker()
        await super().cancel(frame)

    async def cleanup(self):
        await self._cancel_worker()
        await super().cleanup()

    async def _cancel_worker(self) -> None:
        self.abandoned.set()
        self._current = None
        if self._worker is not None:
            worker, self._worker = self._worker, None
            if not worker.done():
                await self.cancel_task(worker)

    @property
    def worker_task(self) -> asyncio.Task | None:
        return self._worker

    async def process_audio_frame(self, frame: InputAudioRawFrame, direction: FrameDirection):
        self._lag.frame(frame)
        if self._muted or not frame.audio:
            return
        self._user_id = frame.user_id if isinstance(frame, UserAudioRawFrame) else ""
        if self._current is not None:
            self._current.append(frame.audio)
            return
        self._ring += frame.audio
        keep = int(self._pre_roll_secs * self.sample_rate) * 2
        if len(self._ring) > keep:
            del self._ring[: len(self._ring) - keep]

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStartedSpeakingFrame):
            self._open_segment()
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            self._close_segment(frame.stop_secs)

    def _open_segment(self) -> None:
        if self._current is not None:
            return  # a repeated start inside a segment
        self._segment_count += 1
        self._current = Segment(self._segment_count, self.sample_rate, bytes(self._ring))
        self._ring.clear()
        self._queue.put_nowait(self._current)

    def _close_segment(self, stop_secs: float) -> None:
        if self._current is None:
            return
        self._current.close(stop_secs)
        self._current = None

    async def _work(self) -> None:
        while True:
            segment = await self._queue.get()
            if segment is None:
                return
            try:
                text = (await self._run_segment(segment)).strip()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                await self.push_error(f"{self}: transcription failed: {e}", exception=e)
                continue
            late = time.monotonic() - (segment.closed_t or time.monotonic())
            unheard = is_unheard_speech(segment, text)
            if late > SLOW_FINAL_SECS or unheard:
                # the evidence for a caller who got no answer (issue 12 soak)
                secs = segment.samples / segment.sample_rate
                peak_db = 20 * np.log10(max(segment.peak_rms, 1e-9))
                logger.info(f"{self}: segment {segment.index} ({secs:.2f} s, peak {peak_db:.0f} "
                            f"dBFS, {segment.passes} passes): final {text!r} {late:.2f} s after "
                            f"the VAD stop; {self._queue.qsize()} segments queued behind it")
                if unheard:
                    await self.push_frame(UnheardSpeechFrame(segment.index, round(secs, 3),
                                                             round(float(peak_db), 1)))
            if text:
                logger.debug(f"{self}: transcript [{text}] after {segment.passes} passes")
                frame = TranscriptionFrame(
                    text,
                    self._user_id,
                    time_now_iso8601(),
                    None,
                    result=self._result(segment, text),
                    finalized=True,
                )
                await self.push_frame(frame)
