"""The server's own turn records for Twilio and Realtime bench calls, read from the server's
latency log (a Realtime session's info names its server session: `server_session_id`).

Media Streams carry audio only, so a Twilio caller never sees the server's "latency" record of a
turn (its transcript, reply, endpointing, LLM and TTS timings, draft and answer-ready flags),
which the browser client receives in-band. The server writes each one to its JSON-lines latency
log (`serve --latency-log`; there without the event's "type"), and a Twilio call's
"telephony.playout" records there name the pipeline session that served its CallSid.
`attach_server_records(levels, log)` joins them:

- a call's records: the "latency" records of the session that served its CallSid (the
  bench's call info per session: `{"session": i, "call_sid": ...}`);
- each answered turn of that call takes the record whose speech end (as the server's VAD saw
  it, on the same clock: the server runs on this machine) lies nearest the client's true end of
  speech, within `before_s` before it and `after_s` after it (the VAD's estimate lands 0.06 s
  late in the median over the browser, up to ~0.2 s; the phone path's resampler adds up to
  0.11 s); a record serves one turn at most. A record of a turn the server ended at a pause in
  the middle of a prompt lies a pause and a phrase earlier, so it is left out;
- the turn's `server` gets the record, its `transcript` and `bot_text` the record's user and
  bot text, as over the browser protocol.
Returns how many turns got a record. Knows nothing about sockets.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


def read_log(path: Path) -> list[dict[str, Any]]:
    """The log's records (lines that are not JSON objects are skipped: a log cut mid-line)."""
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _sessions_by_call(records: Iterable[dict]) -> dict[str, str]:
    return {r["call_sid"]: r["session_id"] for r in records
            if r.get("type") == "telephony.playout" and isinstance(r.get("call_sid"), str)
            and isinstance(r.get("session_id"), str)}


def attach_server_records(levels: Sequence, log: Path | list[dict], before_s: float = 0.25,
                          after_s: float = 0.5) -> int:
    records = read_log(log) if isinstance(log, Path) else list(log)
    session_of = _sessions_by_call(records)
    by_session: dict[str, list[dict]] = defaultdict(list)
    for r in records:
        # a turn's record: written without a "type" (the browser's event adds "latency")
        if r.get("type") in (None, "latency") and isinstance(r.get("speech_end_t"), int | float) \
                and isinstance(r.get("session_id"), str):
            by_session[str(r.get("session_id"))].append(r)
    attached = 0
    for level in levels:
        served = {info["session"]: session_of.get(info["call_sid"], "")
                  for info in level.sessions if "session" in info and "call_sid" in info}
        served.update({info["session"]: info["server_session_id"] for info in level.sessions
                       if "session" in info and "server_session_id" in info})  # Realtime
        for session, server_session in served.items():
            pool = list(by_session.get(server_session, ()))
            turns = [t for t in level.turns if t.session == session and t.status == "ok"
                     and t.speech_end_t is not None]
            for turn in sorted(turns, key=lambda t: t.speech_end_t):
                near = [(abs(r["speech_end_t"] - turn.speech_end_t), i)
                        for i, r in enumerate(pool)
                        if -before_s <= r["speech_end_t"] - turn.speech_end_t <= after_s]
                if not near:
                    continue
                record = pool.pop(min(near)[1])
                turn.server = {**record, **turn.server}  # the client's own fields kept
                turn.transcript = record.get("user_text")
                turn.bot_text = record.get("bot_text") or ""
                attached += 1
    return attached
