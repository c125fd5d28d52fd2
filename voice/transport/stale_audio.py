"""Drop bot audio of an interrupted answer that reaches the socket after the barge-in.

Two ways the interrupted answer could still be heard after the client was told to flush
(`playback.flush`, Twilio `clear`):
1. pipecat's output transport pushes the InterruptionFrame on *before* it drains its audio queue,
   and keeps writing the chunk already in flight (e.g. one waiting for the pacing sleep);
2. the TTS can still push audio of the interrupted answer after the InterruptionFrame passed it
   (synthesis runs in a worker thread; seen under load in the barge-in storm).

Contract: the output transport calls `interrupted()` when an InterruptionFrame reaches it (before
pushing it on) and `started(frame)` for each TTSStartedFrame (a new answer's audio follows it,
if the frame was made after the interruption); it drops an incoming audio frame when
`drops(frame)` (made before the last interruption, so of the interrupted answer);
`is_stale(chunk)` is true for an interruptible audio chunk that belongs to an interrupted
answer: created before the last interruption, or after it but before the next answer's
TTSStartedFrame reached the transport. Frame ids come from pipecat's global, increasing
`obj_id()` counter; the output transport creates its chunk frames when it queues them, in frame
order, so a chunk of the new answer always has a larger id than that answer's TTSStartedFrame.
"""

from __future__ import annotations

from pipecat.utils.utils import obj_id


class StaleAudioGuard:
    def __init__(self) -> None:
        self._watermark = 0  # chunks with a smaller id predate the last interruption
        self._interruption_id = 0  # id of the last InterruptionFrame
        self._resumed_at: int | None = 0  # id of the first TTSStartedFrame after it (None: none)
        self.dropped = 0

    def interrupted(self, frame=None) -> None:
        self._watermark = obj_id()
        # frames the pipeline made before the InterruptionFrame itself (made when the caller
        # began to speak) belong to the interrupted answer
        self._interruption_id = frame.id if frame is not None else self._watermark
        self._resumed_at = None

    def started(self, frame) -> None:
        # a TTSStartedFrame made before the interruption is the interrupted answer's own (the
        # TTS's audio-context task can still push it after the InterruptionFrame went by): it
        # must not let the rest of that answer through
        if self._resumed_at is None and frame.id > self._interruption_id:
            self._resumed_at = frame.id

    def drops(self, frame) -> bool:
        """For audio entering the output transport (before pipecat re-chunks it, which gives
        the chunks new ids): made before the last interruption, so of the interrupted answer."""
        if not getattr(frame, "interruptible", True) or frame.id > self._interruption_id:
            return False
        self.dropped += 1
        return True

    def is_stale(self, chunk) -> bool:
        if not getattr(chunk, "interruptible", True):
            return False
        stale = (chunk.id < self._watermark or self._resumed_at is None
                 or chunk.id < self._resumed_at)
        self.dropped += stale
        return stale
