"""`BrowserTransport`: the pipecat transport of one browser WebSocket session.

The socket itself is owned by `voice.transport.ws_session` (which decodes the wire protocol);
this module only bridges to pipecat:

* input: `await transport.input().push_pcm(pcm)` turns caller PCM (16 kHz int16 mono) into
  InputAudioRawFrames of whole 32 ms VAD windows (voice.transport.vad_aligned); `ready` is set
  once the pipeline can take audio.
* output: each bot audio chunk (`chunk_secs`, 100 ms by default: pipecat's 40 ms default made
  five sends — each a few event-loop turns and a paced sleep — per 0.2 s TTS frame, and under a
  saturated loop a call's answer trickled out at a fraction of real time) is handed to
  `send_audio(bytes)` at the pipeline's output rate,
  paced like a sound card that may run at most `lead_secs` ahead of real-time playback — so
  the client's queue stays short and an interruption drops the rest here, server-side (pipecat's
  output transport empties its queue on InterruptionFrame; chunks of the interrupted answer
  that were already past that queue are dropped too, voice.transport.stale_audio).
  When pipecat's output transport gives up on a write (one over its
  `audio_out_write_timeout_secs`, e.g. after an event-loop stall) it marks itself unusable and
  never writes again: `output().on_output_stalled()` is then called once, so the session can
  close the call with a reason rather than leave it connected and silent (issue 54 N7).

Knows nothing about JSON events, the engine or FastAPI.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from pipecat.frames.frames import (
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    StartFrame,
    TTSStartedFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.transports.base_input import BaseInputTransport
from pipecat.transports.base_output import BaseOutputTransport
from pipecat.transports.base_transport import BaseTransport, TransportParams

from diffvoice.voice.transport.stale_audio import StaleAudioGuard
from diffvoice.voice.transport.vad_aligned import VadAlignedInput

SendAudio = Callable[[bytes], Awaitable[bool]]


class BrowserInputTransport(VadAlignedInput, BaseInputTransport):
    def __init__(self, params: TransportParams, **kwargs) -> None:
        super().__init__(params, **kwargs)
        self.ready = asyncio.Event()

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)
        self.ready.set()

    async def push_pcm(self, pcm: bytes) -> None:
        if not pcm:
            return
        await self.push_audio_frame(
            InputAudioRawFrame(audio=pcm, sample_rate=self.sample_rate, num_channels=1)
        )


class BrowserOutputTransport(BaseOutputTransport):
    def __init__(
        self, params: TransportParams, send_audio: SendAudio, lead_secs: float, **kwargs
    ) -> None:
        super().__init__(params, **kwargs)
        self._send_audio = send_audio
        self._lead_secs = lead_secs
        self._playout_end = 0.0  # monotonic time at which the client finishes what we sent
        self.stale = StaleAudioGuard()
        self.on_output_stalled: Callable[[], None] | None = None  # once, when writes give up

    async def set_usable(self, is_usable: bool) -> None:
        was_usable = self.is_usable
        await super().set_usable(is_usable)
        if was_usable and not is_usable and self.on_output_stalled is not None:
            self.on_output_stalled()

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self.set_transport_ready(frame)

    async def process_frame(self, frame, direction: FrameDirection) -> None:
        if isinstance(frame, InterruptionFrame):
            self.stale.interrupted(frame)  # before pipecat pushes it on (playback.flush goes out)
        elif isinstance(frame, TTSStartedFrame):
            self.stale.started(frame)  # the next answer's audio follows this frame
        elif isinstance(frame, OutputAudioRawFrame) and self.stale.drops(frame):
            return  # the interrupted answer's audio, arriving after the interruption
        await super().process_frame(frame, direction)
        if isinstance(frame, InterruptionFrame):
            self._playout_end = 0.0  # the client flushes its queue

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self.stale.is_stale(frame):
            return True  # the interrupted answer: never sent after the flush
        now = time.monotonic()
        ahead = self._playout_end - now - self._lead_secs
        if ahead > 0:
            await asyncio.sleep(ahead)
            now = time.monotonic()
            if self.stale.is_stale(frame):  # interrupted while this chunk waited its turn
                return True
        if not await self._send_audio(frame.audio):
            return False
        secs = len(frame.audio) / 2 / frame.sample_rate
        self._playout_end = max(self._playout_end, now) + secs
        return True


class BrowserTransport(BaseTransport):
    def __init__(
        self,
        send_audio: SendAudio,
        *,
        input_sample_rate: int,
        output_sample_rate: int,
        lead_secs: float = 0.3,
        chunk_secs: float = 0.1,
    ) -> None:
        super().__init__()
        if not 0.01 <= chunk_secs <= lead_secs:
            raise ValueError(f"chunk_secs must be in [0.01, lead_secs={lead_secs}], "
                             f"got {chunk_secs}")
        params = TransportParams(
            audio_in_enabled=True,
            audio_in_sample_rate=input_sample_rate,
            audio_out_enabled=True,
            audio_out_sample_rate=output_sample_rate,
            audio_out_end_silence_secs=0,
            audio_out_10ms_chunks=round(chunk_secs * 100),
        )
        self._input = BrowserInputTransport(params, name="browser-in")
        self._output = BrowserOutputTransport(params, send_audio, lead_secs, name="browser-out")

    def input(self) -> BrowserInputTransport:
        return self._input

    def output(self) -> BrowserOutputTransport:
        return self._output
