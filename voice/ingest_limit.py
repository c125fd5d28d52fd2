"""Caller audio at the speed of speech: a token bucket measured in seconds of audio.

Contract: one `IngestLimit(rate, burst_s)` per call (a /ws session or a Twilio media stream);
`admit(audio_s)` is asked about every caller audio frame, its length in seconds counted from its
sample count (`pcm_seconds`, `mulaw_seconds`), and answers
- `ACCEPT`: hand the frame to the pipeline. The bucket holds at most `burst_s` seconds of audio
  (full at the start) and refills at `rate` seconds of audio per second of wall time; a frame is
  accepted while the bucket is not empty (it may overdraw it by that one frame, so a 64 KiB
  frame of 2.048 s is not refused for its size alone);
- `DROP`: the bucket is empty: the frame is refused (never queued) and counted as refused;
- `CLOSE`: the caller is ahead of `rate` x real time by more than `burst_s + max_excess_s`
  (`max_excess_s` defaults to `burst_s`), counting every frame it sent, refused ones too: it
  sends faster than `rate` x real time; close the call (docs/protocol.md: 1008
  `audio_too_fast`). What a caller may save by sending below the rate is capped at `save_s`
  (30 s), so a caller that was quiet or slow for a long time is still closed after a bounded
  amount of flood.
The bucket bounds how much audio reaches the pipeline at once; the close rule judges the
caller's sustained rate, not its arrival pattern. Audio sent in real time may arrive late in one
burst when a network, a proxy (Ray Serve's hands a replica its messages in batches) or this
server's own busy event loop held it: such a caller loses that burst's audio beyond the bucket
and is not closed for a stall of up to `save_s + burst_s + max_excess_s` (34 s at the defaults;
a stall is indistinguishable from a quiet caller that then sends all at once). One stall is
known to be the server's: the time from the limit's creation to the first frame read, while the
call was being set up (create the limit when setup starts). A real-time caller that did not wait
for it sent that much audio meanwhile, so the first frame adds `rate` x that time (at most
`save_s`) above the bucket, taken down by the frames it sends; refills stay capped at `burst_s`.
A caller at or below `rate` x real time whose frames arrive as sent is never refused. `rate=0`
turns the limit off (every frame ACCEPT).

Knows nothing about sockets, pipecat or the wire formats beyond sample counting.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

ACCEPT = "accept"
DROP = "drop"
CLOSE = "close"

DEFAULT_RATE = 1.5  # x real time
DEFAULT_BURST_S = 2.0  # seconds of audio beyond the rate, e.g. after a network stall
DEFAULT_SAVE_S = 30.0  # how far below the rate a caller's account may go (see CLOSE)
CLOSE_REASON = "audio_too_fast"


def pcm_seconds(nbytes: int, sample_rate: int, channels: int = 1) -> float:
    """Seconds of 16-bit PCM in `nbytes` bytes."""
    return nbytes / (2 * channels * sample_rate)


def mulaw_seconds(nbytes: int, sample_rate: int = 8000) -> float:
    """Seconds of 8-bit mu-law (one byte a sample: Twilio's 8 kHz = 8000 bytes/s)."""
    return nbytes / sample_rate


@dataclass
class IngestLimit:
    rate: float = DEFAULT_RATE
    burst_s: float = DEFAULT_BURST_S
    max_excess_s: float | None = None  # None: burst_s
    save_s: float = DEFAULT_SAVE_S
    clock: object = field(default=time.monotonic, repr=False)
    credit_s: float = field(init=False)
    ahead_s: float = field(init=False, default=0.0)  # sent beyond rate x real time (< 0: saved)
    refused_s: float = field(init=False, default=0.0)  # refused in all (for logs)
    closed: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        if isinstance(self.rate, bool) or not isinstance(self.rate, (int, float)) or not (
                self.rate == 0 or self.rate >= 1):
            raise ValueError(f"rate must be 0 (off) or >= 1 (x real time), got {self.rate!r}")
        if not isinstance(self.burst_s, (int, float)) or not self.burst_s > 0:
            raise ValueError(f"burst_s must be > 0, got {self.burst_s!r}")
        if self.max_excess_s is None:
            self.max_excess_s = self.burst_s
        if not self.max_excess_s > 0:
            raise ValueError(f"max_excess_s must be > 0, got {self.max_excess_s!r}")
        if not self.save_s >= 0:
            raise ValueError(f"save_s must be >= 0, got {self.save_s!r}")
        self.credit_s = self.burst_s
        self._last = self.clock()
        self._reading = False

    @classmethod
    def from_config(cls, config) -> IngestLimit:
        """From ServeConfig's `audio_rate_limit` / `audio_burst_s` (defaults when absent)."""
        return cls(rate=getattr(config, "audio_rate_limit", DEFAULT_RATE),
                   burst_s=getattr(config, "audio_burst_s", DEFAULT_BURST_S))

    def admit(self, audio_s: float) -> str:
        if self.rate == 0:
            return ACCEPT
        if self.closed:
            return CLOSE
        now = self.clock()
        elapsed, self._last = now - self._last, now
        if not self._reading:  # the first frame: what was sent before reading began is taken
            self._reading = True
            self.credit_s += min(self.save_s, elapsed * self.rate)
        if self.credit_s < self.burst_s:  # a refill never takes away the first frame's credit
            self.credit_s = min(self.burst_s, self.credit_s + elapsed * self.rate)
        self.ahead_s = max(-self.save_s, self.ahead_s - elapsed * self.rate) + audio_s
        if self.ahead_s > self.burst_s + self.max_excess_s:
            self.closed = True
            self.refused_s += audio_s
            return CLOSE
        if self.credit_s > 0:
            self.credit_s -= audio_s
            return ACCEPT
        self.refused_s += audio_s
        return DROP
