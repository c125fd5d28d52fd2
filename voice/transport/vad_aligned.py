"""Caller audio into the pipeline in whole VAD windows (32 ms) instead of the wire's 20 ms frames.

Contract: `VadAlignedInput` is a mixin for a pipecat BaseInputTransport subclass (put it first
in the bases). Its `push_audio_frame` buffers the caller's PCM and pushes one
InputAudioRawFrame holding every whole 32 ms window buffered so far (512 samples at 16 kHz, 256
at 8 kHz: Silero's window), keeping the rest for the next frame. A change of sample rate or
channel count flushes what is buffered first.

Why: every input frame costs a queue hop, a task switch and observer calls in each processor up
to the user aggregator, all on the event loop; 20 ms frames from the browser and Twilio meant 50
hops a second per processor per caller. The VAD only decides on whole 32 ms windows, so a
window's samples reach it at the same moment as before (when the wire frame that completes the
window arrives): 31.25 frames a second instead of 50 with no later speech or silence
decisions. ASR hears at most 20 ms of audio later.

`windows_per_frame` (ServeConfig.input_frame_ms / 32, default 1) groups that many windows into
one frame: half the hops again at 2 (64 ms), for a speech or silence decision up to 32 ms later
(the VAD decides on the frame's windows when the frame arrives).

`_audio_task_handler` replaces pipecat's BaseInputTransport one, which takes each frame with
`asyncio.wait_for(queue.get(), 0.5)` (a new task, two event-loop turns per frame) and then does
nothing on the timeout: on a loop that needed more than ~16 ms a turn, a call's audio went
downstream slower than real time and the lag only grew (a 2-worker 32-caller soak: browser
calls whose audio reached the ASR and VAD 5-50 s late, the caller never answered). Here frames
are taken with a plain `get()`, and a backlog (frames already queued) goes on as one frame of up
to MAX_MERGED_WINDOWS windows, so a call that fell behind catches up instead of staying behind.
pipecat's audio_in_filter and audio_in_passthrough are honoured as in pipecat.

Downstream, the user aggregator runs the VAD once per frame through an executor (again two
loop turns a frame), so a backlog can also form in front of it. `backlog` (set by
voice.pipeline: the audio this transport pushed on minus what the VAD has received, both
counted in samples, so a pause in the caller's audio is no backlog) above
CATCH_UP_BACKLOG_SECS makes new frames CATCH_UP_WINDOWS windows long (0.256 s) until it is
back under: 8x fewer VAD round trips while the call catches up, speech / silence decided up to
0.224 s later meanwhile. `catch_up_frames` counts such frames.

The input queue is bounded: caller audio waiting in it (`queued_secs`, counted as frames go in
and come out) may not exceed MAX_QUEUED_SECS; a frame that would is dropped (`dropped_secs`,
logged once per call). Callers are already held to the speed of speech (voice.ingest_limit), so
this only bites when the pipeline falls that far behind; memory stays bounded either way.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from loguru import logger
from pipecat.frames.frames import InputAudioRawFrame

WINDOW_SECS = 0.032
MAX_MERGED_WINDOWS = 16  # a backlog goes downstream in frames of at most 0.512 s
CATCH_UP_BACKLOG_SECS = 0.1  # audio pushed on but not yet at the VAD beyond this: catch up
CATCH_UP_WINDOWS = 8  # frames of 0.256 s while catching up
MAX_QUEUED_SECS = 20.0  # caller audio waiting in the input queue; beyond it frames are dropped


def _window_bytes(rate: int, channels: int) -> int:
    """Bytes of one 32 ms VAD window of int16 audio."""
    return int(rate * WINDOW_SECS) * 2 * channels


class VadAlignedInput:
    windows_per_frame = 1  # set per transport from ServeConfig.input_frame_ms

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pending = bytearray()
        self._pending_format: tuple[int, int] | None = None
        self.pushed_secs = 0.0  # caller audio handed downstream so far (stream time)
        # seconds of that audio the VAD has not received yet (set by the pipeline), or None
        self.backlog: Callable[[], float] | None = None
        self.catch_up_frames = 0  # frames sent as CATCH_UP_WINDOWS because of a backlog
        self.queued_secs = 0.0  # caller audio in pipecat's input queue, not yet taken
        self.dropped_secs = 0.0  # caller audio dropped because the queue was full
        self._counted_queue = None  # the queue queued_secs counts (pipecat makes it in start)

    async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
        fmt = (frame.sample_rate, frame.num_channels)
        if fmt != self._pending_format and self._pending:
            await self._push_pending(len(self._pending))
        self._pending_format = fmt
        self._pending += frame.audio
        windows = self.windows_per_frame
        if self.backlog is not None and self.backlog() > CATCH_UP_BACKLOG_SECS:
            windows = max(windows, CATCH_UP_WINDOWS)  # fewer, larger frames until caught up
        window = _window_bytes(frame.sample_rate, frame.num_channels) * windows
        whole = len(self._pending) // window * window
        if whole:
            if windows > self.windows_per_frame:
                self.catch_up_frames += 1
            await self._push_pending(whole)

    async def _push_pending(self, nbytes: int) -> None:
        rate, channels = self._pending_format
        audio = bytes(self._pending[:nbytes])
        del self._pending[:nbytes]
        frame = InputAudioRawFrame(audio=audio, sample_rate=rate, num_channels=channels)
        frame.received_t = time.time()  # when its last wire frame arrived (voice.lag_watch)
        secs = nbytes / (2 * channels * rate)
        queue = getattr(self, "_audio_in_queue", None)
        if queue is not None:
            if queue is not self._counted_queue:
                self._counted_queue, self.queued_secs = queue, 0.0
            if self.queued_secs + secs > MAX_QUEUED_SECS:
                if not self.dropped_secs:
                    logger.warning(f"{self}: caller audio input queue full ({MAX_QUEUED_SECS:g} "
                                   "s behind): dropping caller audio until it drains")
                self.dropped_secs += secs
                return
            queued_before = queue.qsize()
        self.pushed_secs += secs
        await super().push_audio_frame(frame)
        if queue is not None and queue.qsize() > queued_before:
            self.queued_secs += secs

    def _taken(self, frame: InputAudioRawFrame) -> InputAudioRawFrame:
        """`frame` left the input queue: no longer counted in queued_secs."""
        secs = len(frame.audio) / (2 * frame.num_channels * frame.sample_rate)
        self.queued_secs = max(0.0, self.queued_secs - secs)
        return frame

    async def _audio_task_handler(self) -> None:
        queue = self._audio_in_queue
        carry = None  # a frame taken from the queue that did not fit the last merge
        while True:
            first = carry if carry is not None else self._taken(await queue.get())
            carry = None
            frames = [first]
            fmt = (first.sample_rate, first.num_channels)
            budget = _window_bytes(*fmt) * MAX_MERGED_WINDOWS
            size = len(first.audio)
            while not queue.empty():  # a backlog: what is queued goes on as one frame
                nxt = self._taken(queue.get_nowait())
                if (nxt.sample_rate, nxt.num_channels) != fmt or size + len(nxt.audio) > budget:
                    carry = nxt
                    break
                frames.append(nxt)
                size += len(nxt.audio)
            frame = first
            if len(frames) > 1:
                frame = InputAudioRawFrame(audio=b"".join(f.audio for f in frames),
                                           sample_rate=fmt[0], num_channels=fmt[1])
                frame.received_t = getattr(first, "received_t", None)
            try:
                if self._params.audio_in_filter:
                    frame.audio = await self._params.audio_in_filter.filter(frame.audio)
                if frame.audio and self._params.audio_in_passthrough:
                    await self.push_frame(frame)
            finally:
                for _ in frames:
                    queue.task_done()
