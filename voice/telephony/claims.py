"""Stream claims on disk: a CallSid whose Media Stream was opened stays claimed across restarts.

Why: one stream per call was enforced in memory only (admission.PhoneAdmission, and
voice.scale.phone_calls for `serve --workers`). A captured signed webhook, replayed after the
server restarted, got a fresh stream token and opened a stream as the original caller (their
phone number is the owner of their bookings). Twilio signs no timestamp into a voice webhook,
so the server has to remember which calls it has served.

Contract: `ClaimStore(path)` opens (creating) a small SQLite file; `claim(call_sid, until,
now=None) -> bool` is True once per CallSid until `until` (Unix time) passes, across processes
(every `--workers` process opens the same file; SQLite's lock makes the first one win) and
restarts. Expired claims are deleted as new ones are made (at most PRUNE_ROWS per claim).
`default_path(auth_token)`: the user's data directory, one file per Twilio auth token (a
server and its restarts share it; servers of other accounts do not). A claim is one indexed
insert in WAL mode (well under a millisecond): done on the event loop, like the in-memory one.
Knows nothing about sockets or Twilio's wire format.
"""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from pathlib import Path

PRUNE_ROWS = 64


def default_path(auth_token: str | None) -> Path:
    import platformdirs

    digest = hashlib.sha256((auth_token or "").encode()).hexdigest()[:16]
    return platformdirs.user_data_path("diffvoice") / f"twilio-claims-{digest}.sqlite3"


class ClaimStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, timeout=5.0, isolation_level=None,
                                   check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("CREATE TABLE IF NOT EXISTS claims (call_sid TEXT PRIMARY KEY, "
                         "until REAL NOT NULL)")
        self._db.execute("CREATE INDEX IF NOT EXISTS claims_until ON claims (until)")

    def claim(self, call_sid: str, until: float, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM claims WHERE rowid IN (SELECT rowid FROM claims "
                           "WHERE until <= ? LIMIT ?)", (now, PRUNE_ROWS))
                made = db.execute("INSERT OR IGNORE INTO claims VALUES (?, ?)",
                                  (call_sid, until)).rowcount == 1
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return made

    def close(self) -> None:
        with self._lock:
            self._db.close()
