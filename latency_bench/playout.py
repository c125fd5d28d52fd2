"""When the caller *hears* bot audio: a model of the client's gap-free playback queue.

Servers may send audio faster than real time (the diffvoice server runs about 2x ahead) or
stream silence between answers (many Twilio-speaking stacks do), so "first frame received" is
not "first sound heard". `Playout` models what a browser page or a phone does with the frames:

- a frame of n samples arriving at epoch time t starts playing at max(t, end of the queue) and
  occupies n / rate seconds of it;
- a sample is *audible* when its 10 ms window is above `threshold_db` dBFS (RMS);
- `flush(t)` drops everything queued but not yet played at t (barge-in, Twilio "clear").

Per turn it records `first_frame_t` / `last_frame_t` (arrival times), `first_audible_t` (when the
first audible sample plays) and `last_audible_end_t` (when the last audible window finishes).
`start_turn()` clears those fields and keeps the queue. Pure and clock-free: callers pass the
times. It knows nothing about sockets or codecs.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.010


class Playout:
    def __init__(self, sample_rate: int, threshold_db: float = -45.0) -> None:
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
        self.sample_rate = sample_rate
        self.threshold_db = threshold_db
        self._window = max(1, int(round(WINDOW_S * sample_rate)))
        self.queue_end_t = 0.0
        self.start_turn()

    def start_turn(self) -> None:
        self.first_frame_t: float | None = None
        self.last_frame_t: float | None = None
        self.first_audible_t: float | None = None
        self.last_audible_end_t: float | None = None
        self.samples_received = 0

    def _audible_windows(self, pcm: np.ndarray) -> np.ndarray:
        """Indices of the audible 10 ms windows of `pcm` (a trailing partial window counts)."""
        x = pcm.astype(np.float64) / 32768.0
        n_windows = -(-len(x) // self._window)
        padded = np.zeros(n_windows * self._window)
        padded[: len(x)] = x
        frames = padded.reshape(n_windows, self._window)                   # [W, window]
        lengths = np.full(n_windows, self._window)
        lengths[-1] = len(x) - (n_windows - 1) * self._window
        level_db = 10.0 * np.log10((frames**2).sum(axis=1) / lengths + 1e-12)
        return np.flatnonzero(level_db > self.threshold_db)

    def push(self, pcm: np.ndarray, arrival_t: float) -> None:
        """Queue one received frame of int16 samples that arrived at epoch `arrival_t`."""
        pcm = np.asarray(pcm)
        if pcm.size == 0:
            return
        start_t = max(arrival_t, self.queue_end_t)
        if self.first_frame_t is None:
            self.first_frame_t = arrival_t
        self.last_frame_t = arrival_t
        self.samples_received += int(pcm.size)
        audible = self._audible_windows(pcm)
        if audible.size:
            if self.first_audible_t is None:
                self.first_audible_t = float(start_t + audible[0] * self._window / self.sample_rate)
            end_sample = min((int(audible[-1]) + 1) * self._window, pcm.size)
            self.last_audible_end_t = float(start_t + end_sample / self.sample_rate)
        self.queue_end_t = start_t + pcm.size / self.sample_rate

    def flush(self, t: float) -> None:
        """Drop queued audio not yet played at `t`."""
        self.queue_end_t = min(self.queue_end_t, t)
        if self.last_audible_end_t is not None and self.last_audible_end_t > t:
            self.last_audible_end_t = t

    def playing_until(self, now: float) -> float:
        """When the audio queued so far finishes playing (>= now)."""
        return max(now, self.queue_end_t)
