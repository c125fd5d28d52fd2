"""When the caller actually heard the bot: Twilio ``mark`` echoes joined to latency records.

Contract
--------
The server only knows when it *sent* the first answer audio (``first_audio_sent_t`` in the
latency record). Twilio buffers what we send and plays it out to the call in real time; when
everything sent before a ``mark`` message has been played, Twilio echoes that mark back. So we
send a mark right after the first audio chunk of every bot speech run and learn, from its echo,
when that chunk had been played to the caller.

:class:`PlayoutTracker` is sans-I/O. The transport tells it:

- ``speech_started(write_t) -> mark_name``: the first chunk of a run was written to the socket
  at ``write_t``; send this mark right after it.
- ``speech_stopped(now) -> mark_name``: the run ended; send this mark (its echo = playback done).
- ``interrupted(now)``: we sent ``clear``. Twilio drops the buffered audio and echoes all
  outstanding marks at once, so echoes of marks outstanding at that moment do not mean "heard".
- ``mark_echoed(name, now)``: Twilio sent a mark back.
- ``on_latency(record)``: the pipeline finished a turn's latency record.
- ``expire(now)`` / ``close(now)``: give up waiting (no echo within ``wait_for_echo_s``, or the
  call ended).

Each record is matched to the first speech run that started at or after its ``vad_stop_t``
(the answer to that turn), whichever of the two arrives first. It is passed to ``emit`` once,
as a copy with these fields added:

- ``first_audio_heard_t``: epoch seconds of the echo of the mark after the first chunk, or
  ``None`` if the caller never heard it (cleared, call ended, or no echo in time). This is an
  upper bound by one chunk (20-40 ms) on when the caller started hearing the answer, and it is
  measured at Twilio's media edge: carrier transit to the handset is not included.
- ``first_chunk_written_t``: when that first chunk was written to the socket (our own clock,
  so the difference below is causal even on loopback).
- ``playout_ms``: ``first_audio_heard_t - first_chunk_written_t`` in ms (the network both ways
  plus Twilio's buffer), or ``None``.
- ``heard_ms``: ``first_audio_heard_t - vad_stop_t`` in ms, or ``None``.
- ``playout``: "heard" | "cleared" | "no_echo" | "no_audio".

This module knows nothing about Twilio's JSON or pipecat frames.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

logger = logging.getLogger(__name__)

_MAX_RUNS = 64


@dataclass
class _Run:
    index: int
    started_t: float
    first_mark: str
    heard_t: float | None = None
    cleared: bool = False


class PlayoutTracker:
    """Joins mark echoes to latency records; see the module docstring."""

    def __init__(
        self,
        emit: Callable[[dict], None],
        *,
        prefix: str = "dv",
        wait_for_echo_s: float = 10.0,
        extra_fields: dict | None = None,
    ):
        if wait_for_echo_s <= 0:
            raise ValueError("wait_for_echo_s must be > 0")
        self._emit = emit
        self._prefix = prefix
        self._wait_for_echo_s = wait_for_echo_s
        self._extra = dict(extra_fields or {})
        self._runs: deque[_Run] = deque(maxlen=_MAX_RUNS)
        self._outstanding: set[str] = set()  # marks sent, not yet echoed
        self._ignored: set[str] = set()  # marks flushed by a clear: their echo is not "heard"
        self._pending: list[tuple[float, dict]] = []  # (arrived_t, record) awaiting an echo
        self._run_count = 0
        self.closed = False

    # -- transport side ------------------------------------------------------------------------
    def speech_started(self, write_t: float) -> str:
        self._run_count += 1
        name = f"{self._prefix}-{self._run_count}-first"
        self._runs.append(_Run(self._run_count, write_t, name))
        self._outstanding.add(name)
        self._resolve(write_t)
        return name

    def speech_stopped(self, now: float) -> str:
        name = f"{self._prefix}-{self._run_count}-end"
        self._outstanding.add(name)
        return name

    def interrupted(self, now: float) -> None:
        self._ignored |= self._outstanding
        for run in self._runs:
            if run.heard_t is None and run.first_mark in self._outstanding:
                run.cleared = True
        self._outstanding.clear()
        self._resolve(now)

    def mark_echoed(self, name: str, now: float) -> None:
        self._outstanding.discard(name)
        if name in self._ignored:
            self._ignored.discard(name)
            return
        for run in self._runs:
            if run.first_mark == name and run.heard_t is None and not run.cleared:
                run.heard_t = now
        self._resolve(now)

    # -- pipeline side -------------------------------------------------------------------------
    def on_latency(self, record: dict, now: float) -> None:
        if self.closed:
            self._emit(self._finish(record, None))
            return
        self._pending.append((now, record))
        self._resolve(now)

    def expire(self, now: float) -> None:
        self._resolve(now)

    def close(self, now: float) -> None:
        self._resolve(now, final=True)
        self.closed = True

    # -- internals -----------------------------------------------------------------------------
    def _run_for(self, record: dict) -> _Run | None:
        anchor = record.get("vad_stop_t") or record.get("transcript_final_t")
        if anchor is None:
            return None
        for run in self._runs:
            if run.started_t >= anchor:
                return run
        return None

    def _resolve(self, now: float, final: bool = False) -> None:
        still_pending = []
        for arrived_t, record in self._pending:
            run = self._run_for(record)
            timed_out = final or now - arrived_t >= self._wait_for_echo_s
            if run is not None and (run.heard_t is not None or run.cleared):
                self._emit(self._finish(record, run))
            elif timed_out:
                self._emit(self._finish(record, run))
            else:
                still_pending.append((arrived_t, record))
        self._pending = still_pending

    def _finish(self, record: dict, run: _Run | None) -> dict:
        out = dict(record)
        out.update(self._extra)
        heard_t = run.heard_t if run is not None else None
        if run is None:
            outcome = "no_audio"
        elif heard_t is not None:
            outcome = "heard"
        elif run.cleared:
            outcome = "cleared"
        else:
            outcome = "no_echo"
        sent_t = run.started_t if run is not None else None
        vad_stop_t = record.get("vad_stop_t")
        out["first_chunk_written_t"] = sent_t
        out["first_audio_heard_t"] = heard_t
        out["playout_ms"] = (
            round((heard_t - sent_t) * 1000.0, 1) if heard_t is not None and sent_t else None
        )
        out["heard_ms"] = (
            round((heard_t - vad_stop_t) * 1000.0, 1)
            if heard_t is not None and vad_stop_t
            else None
        )
        out["playout"] = outcome
        return out
