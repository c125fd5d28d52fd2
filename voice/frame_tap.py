"""`FrameTap`: a pass-through pipecat processor that shows every frame to a callback.

Contract: forwards every frame unchanged in its direction, right after awaiting
`callback(name, frame, direction)`; the callback must be quick (it runs on the frame path).
Used by voice.pipeline to let `TurnTracker` observe a pipeline at fixed points without
touching the services. Runs in pipecat's direct mode (no queue and no task of its own: the frame
is handled in the pushing processor's task), so a tap adds no event-loop hop per frame.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pipecat.frames.frames import Frame
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

TapCallback = Callable[[str, Frame, FrameDirection], Awaitable[None]]


class FrameTap(FrameProcessor):
    def __init__(self, tap_name: str, callback: TapCallback, **kwargs) -> None:
        kwargs.setdefault("enable_direct_mode", True)
        super().__init__(name=f"tap-{tap_name}", **kwargs)
        self._tap_name = tap_name
        self._callback = callback

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        await self._callback(self._tap_name, frame, direction)
        await self.push_frame(frame, direction)
