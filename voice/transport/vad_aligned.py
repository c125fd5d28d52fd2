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
"""

from __future__ import annotations

import time

from pipecat.frames.frames import InputAudioRawFrame

WINDOW_SECS = 0.032


class VadAlignedInput:
    windows_per_frame = 1  # set per transport from ServeConfig.input_frame_ms

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._pending = bytearray()
        self._pending_format: tuple[int, int] | None = None

    async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
        fmt = (frame.sample_rate, frame.num_channels)
        if fmt != self._pending_format and self._pending:
            await self._push_pending(len(self._pending))
        self._pending_format = fmt
        self._pending += frame.audio
        window = (int(frame.sample_rate * WINDOW_SECS) * 2 * frame.num_channels
                  * self.windows_per_frame)
        whole = len(self._pending) // window * window
        if whole:
            await self._push_pending(whole)

    async def _push_pending(self, nbytes: int) -> None:
        rate, channels = self._pending_format
        audio = bytes(self._pending[:nbytes])
        del self._pending[:nbytes]
        frame = InputAudioRawFrame(audio=audio, sample_rate=rate, num_channels=channels)
        frame.received_t = time.time()  # when its last wire frame arrived (voice.lag_watch)
        await super().push_audio_frame(frame)
