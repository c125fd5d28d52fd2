"""Drop bot audio that was produced before a barge-in but reaches the socket after it.

pipecat's output transport pushes an InterruptionFrame downstream *before* it drains its audio
queue, and keeps writing the chunk already in flight (e.g. one waiting for the sound-card pacing
sleep). So one or two chunks of the interrupted answer could go out after the client was told to
flush (`playback.flush`, Twilio `clear`): stale audio the caller hears over their own barge-in.

Contract: `StaleAudioGuard.interrupted()` is called when an InterruptionFrame reaches the output
transport (before it is pushed on); `is_stale(frame)` is true for an interruptible audio frame
created before the last interruption. Frame ids come from pipecat's global `obj_id()` counter,
and the output transport creates its chunk frames when it queues them, so every chunk of the new
answer has a larger id than the watermark and every chunk of the interrupted one a smaller id.
"""

from __future__ import annotations

from pipecat.utils.utils import obj_id


class StaleAudioGuard:
    def __init__(self) -> None:
        self._watermark = 0
        self.dropped = 0

    def interrupted(self) -> None:
        self._watermark = obj_id()

    def is_stale(self, frame) -> bool:
        stale = getattr(frame, "interruptible", True) and frame.id < self._watermark
        self.dropped += stale
        return stale
