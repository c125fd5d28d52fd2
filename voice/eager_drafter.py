"""`EagerDrafter`: the pipecat processor that starts answer drafts while the caller speaks.

Sits between the ASR and the user aggregator. Within one user turn it keeps the segments' final
transcripts and the current segment's interim transcript; their concatenation is what the turn
would say if it ended now. It calls `drafts.propose(text)` (voice.drafting.DraftManager):
* when that text has stayed the same (normalised) for `stable_secs` — an interim that stopped
  changing;
* at once when a segment's final transcript arrives (the VAD saw a short pause), before the
  frame moves on, so the turn-stop strategy downstream already finds the draft running;
* at once when an interim comes from a recognition pass at the caller's pause
  (`result.at_pause`, voice.asr.streaming_stt): the recogniser hears a pause before the VAD
  ends the segment, so the answer to what the turn says if it ends there is drafted by then.
A turn's text is forgotten at UserStoppedSpeakingFrame; pending timers die with the turn or the
pipeline (not at an interruption: that is the start of the turn being drafted). Every frame is
passed on unchanged. Knows nothing about the engine.
"""

from __future__ import annotations

import asyncio

from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    Frame,
    InterimTranscriptionFrame,
    TranscriptionFrame,
    UserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

from diffvoice.voice.drafting import DraftManager, normalise


class EagerDrafter(FrameProcessor):
    def __init__(self, drafts: DraftManager, *, stable_secs: float = 0.15, **kwargs) -> None:
        kwargs.setdefault("enable_direct_mode", True)  # quick: no queue hop per audio frame
        super().__init__(**kwargs)
        if stable_secs < 0:
            raise ValueError(f"stable_secs must be >= 0, got {stable_secs!r}")
        self._drafts = drafts
        self._stable_secs = stable_secs
        self._segments: list[str] = []
        self._interim = ""
        self._timer: asyncio.Task | None = None
        self._last_key = ""

    @property
    def text(self) -> str:
        return " ".join(s for s in [*self._segments, self._interim] if s)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame) and frame.text.strip():
            self._segments.append(frame.text.strip())
            self._interim = ""
            await self._cancel_timer()
            self._last_key = normalise(self.text)
            self._drafts.propose(self.text)
        elif isinstance(frame, InterimTranscriptionFrame) and frame.text.strip():
            self._interim = frame.text.strip()
            key = normalise(self.text)
            if key and getattr(frame.result, "at_pause", False):
                self._last_key = key
                await self._cancel_timer()
                self._drafts.propose(self.text)
            elif key and key != self._last_key:
                self._last_key = key
                await self._cancel_timer()
                self._timer = self.create_task(self._propose_when_stable(self.text),
                                               "draft-stable-timer")
        elif isinstance(frame, UserStoppedSpeakingFrame):
            self._segments, self._interim, self._last_key = [], "", ""
            await self._cancel_timer()
        elif isinstance(frame, (EndFrame, CancelFrame)):
            await self._cancel_timer()
        await self.push_frame(frame, direction)

    async def _propose_when_stable(self, text: str) -> None:
        await asyncio.sleep(self._stable_secs)
        self._timer = None
        self._drafts.propose(text)

    async def _cancel_timer(self) -> None:
        if self._timer is not None:
            timer, self._timer = self._timer, None
            await self.cancel_task(timer)

    async def cleanup(self) -> None:
        await self._cancel_timer()
        await super().cleanup()
