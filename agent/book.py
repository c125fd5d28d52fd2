"""The receptionist's appointment book: a real SQLite file, one week of weekday slots.

    book = AppointmentBook(path, facts)      # creates the file and tables on first use
    book.free_starts("cleanings", "friday")  # -> ["08:00", "08:30", ...]
    book.book("cleanings", "friday", "10:00", "Ann Lee", owner="phone:+15550100") -> Booking | None
    book.cancel("ann lee", "friday", owner="phone:+15550100") -> ids cancelled ([]: none)
    book.book(..., hold=True) / book.cancel(..., hold=True), then book.settle(ids, keep):
        a change held until the caller heard it confirmed (voice.tool_ledger)
Slots come from the fact sheet: each day's opening hours on a 30-minute grid (SLOT_MIN) and each
service's duration (`Service.minutes`, or its duration text: "45 minutes", "1 hour"); a visit
must end by closing time and occupies every grid cell it overlaps. One chair: two visits never
overlap. Days are weekday names (the demo books into one recurring week; no dates).

No double booking, across threads and processes: a booking is one `BEGIN IMMEDIATE` transaction
that inserts the visit and one `cells(day, cell)` row per occupied cell; `(day, cell)` is the
primary key, so a second booking of an overlapping slot fails its insert and rolls back whole.
Bookings survive restarts (it is a file). Each operation opens and closes its own connection, so
no file descriptor outlives a call, whatever thread runs it. Knows nothing about pipecat or the
engine.

Who may cancel what: every visit stores its `owner` (an opaque string from the caller's session,
agent.owner; NULL: nobody's). `cancel(name, day, owner, rule="caller")` looks only
at `owner`'s visits on `day` (no owner: cancels nothing); `rule="any"` looks at everyone's.
Names are stored as said (trimmed) and compared exactly; only when no visit has exactly that
name does a case-insensitive match count, and only if it finds one spelling: within one owner
"ann lee" cancels their "Ann Lee", and under `any` it cancels nothing while both "Ann Lee" and
"ann LEE" are booked. A file made before owners existed gets the column on open (its visits:
NULL, cancellable only under `any`).

How much one owner may hold (issue 54 N13: one caller booked all 47 starts of the week):
`AppointmentBook(path, facts, max_open_per_owner=3)` refuses an owner's booking while that
owner already holds that many visits (the book has no dates: every visit is open until
cancelled), raising `OwnerLimitReached`, checked inside the booking's transaction so parallel
calls from one number cannot pass it together. Visits with no owner are not counted.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SLOT_MIN = 30
# a visit's state: BOOKED; HELD (booked, not yet confirmed to the caller: its cells are taken,
# settle() keeps or removes it); CANCELLING (cancelled, not yet confirmed: it keeps its cells,
# settle() removes or restores it)
BOOKED, HELD, CANCELLING = "booked", "held", "cancelling"
STALE_PENDING_S = 600.0  # a change nobody settled in this long is undone (its call died)
MAX_OPEN_PER_OWNER = 3  # visits one caller may hold at once


class OwnerLimitReached(Exception):
    """The owner already holds `limit` visits: cancel one before booking another."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"owner already holds {limit} visits")
        self.limit = limit
DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_SCHEMA = """
CREATE TABLE IF NOT EXISTS visits (
    id INTEGER PRIMARY KEY,
    service TEXT NOT NULL,
    day TEXT NOT NULL,
    start_min INTEGER NOT NULL,
    end_min INTEGER NOT NULL,
    name TEXT NOT NULL,
    created REAL NOT NULL,
    owner TEXT,
    state TEXT NOT NULL DEFAULT 'booked',
    pending_since REAL
);
CREATE TABLE IF NOT EXISTS cells (
    day TEXT NOT NULL,
    cell INTEGER NOT NULL,
    visit_id INTEGER NOT NULL REFERENCES visits(id) ON DELETE CASCADE,
    PRIMARY KEY (day, cell)
);
"""


def duration_minutes(text: str, where: str) -> int:
    """'45 minutes' / '1 hour' / '90 minutes' / '1.5 hours' -> minutes (ValueError otherwise)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(minutes?|mins?|hours?|h)\s*", text or "")
    if not match:
        raise ValueError(f"{where}: duration must be like '45 minutes' or '1 hour', got {text!r}")
    value = float(match.group(1)) * (60 if match.group(2).startswith("h") else 1)
    if value <= 0 or value != int(value):
        raise ValueError(f"{where}: duration must be a whole, positive number of minutes")
    return int(value)


def _clock(text: str) -> int:
    """'8 am' / '10:30 pm' -> minutes after midnight."""
    match = re.fullmatch(r"\s*(\d{1,2})(?::(\d\d))?\s*(am|pm)\s*", text)
    if not match:
        raise ValueError(f"opening hours must read like '8 am to 5 pm', got {text!r}")
    return int(match.group(1)) % 12 * 60 + (720 if match.group(3) == "pm" else 0) + int(
        match.group(2) or 0)


def hhmm(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def parse_hhmm(text: str) -> int | None:
    match = re.fullmatch(r"([01]\d|2[0-3]):([0-5]\d)", text or "")
    return int(match.group(1)) * 60 + int(match.group(2)) if match else None


@dataclass(frozen=True)
class Booking:
    id: int
    service: str
    day: str
    time: str
    name: str
    owner: str | None = None
    state: str = BOOKED


class AppointmentBook:
    def __init__(self, path: str | Path, facts,
                 max_open_per_owner: int = MAX_OPEN_PER_OWNER) -> None:
        if isinstance(max_open_per_owner, bool) or not isinstance(max_open_per_owner, int) \
                or max_open_per_owner < 1:
            raise ValueError(f"max_open_per_owner must be an integer >= 1, "
                             f"got {max_open_per_owner!r}")
        self.max_open_per_owner = max_open_per_owner
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.hours: dict[str, tuple[int, int] | None] = {}
        for day in DAYS:
            spec = dict(facts.hours).get(day, "closed")
            if spec == "closed":
                self.hours[day] = None
            else:
                start, end = (_clock(p) for p in spec.split(" to "))
                self.hours[day] = (start, end)
        self.durations = {  # the fact sheet's minutes (recep's Service.minutes), else parsed
            s.name: getattr(s, "minutes", None)
            or duration_minutes(s.duration, f"services[{s.name}].duration")
            for s in facts.services}
        with self._conn() as conn:
            conn.execute("PRAGMA journal_mode = WAL")  # kept in the file
            conn.executescript(_SCHEMA)
            self._migrate(conn)

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        """Add `owner` to a book made before it existed (its visits stay NULL: nobody's)."""
        conn.execute("BEGIN IMMEDIATE")  # one process adds it; the others then see it
        try:
            columns = {row[1] for row in conn.execute("PRAGMA table_info(visits)")}
            if "owner" not in columns:
                conn.execute("ALTER TABLE visits ADD COLUMN owner TEXT")
            if "state" not in columns:  # held bookings and cancellations (settle)
                conn.execute("ALTER TABLE visits ADD COLUMN state TEXT NOT NULL "
                             "DEFAULT 'booked'")
                conn.execute("ALTER TABLE visits ADD COLUMN pending_since REAL")
            conn.execute("CREATE INDEX IF NOT EXISTS visits_day_owner ON visits (day, owner)")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    @contextmanager
    def _conn(self) -> Iterator[sqlite3.Connection]:
        """A connection for one operation, closed after it. Tools run on whatever worker thread
        asyncio.to_thread picks; a connection kept per thread stayed open as long as that
        pool thread lived (2 file descriptors each, never returned: docs/reliability.md). No
        connection is held between operations either: SQLite defers closing a file descriptor
        while another connection of the process holds a lock on the file, so one held open kept
        every closed connection's descriptors too."""
        conn = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        try:
            conn.execute("PRAGMA foreign_keys = ON")
            yield conn
        finally:
            conn.close()

    def close(self) -> None:
        """Nothing to release (no connection outlives an operation); kept for callers."""

    # ------------------------------------------------------------------ queries
    def _cells(self, start: int, service: str) -> range:
        end = start + self.durations[service]
        return range(start // SLOT_MIN, -(-end // SLOT_MIN))

    def starts(self, service: str, day: str) -> list[int]:
        """Every grid start on `day` at which `service` fits inside opening hours."""
        hours = self.hours.get(day)
        if hours is None:
            return []
        open_, close = hours
        first = -(-open_ // SLOT_MIN) * SLOT_MIN
        return [m for m in range(first, close, SLOT_MIN) if m + self.durations[service] <= close]

    def free_starts(self, service: str, day: str) -> list[str]:
        with self._conn() as conn:
            taken = {row[0] for row in conn.execute(
                "SELECT cell FROM cells WHERE day = ?", (day,))}
        return [hhmm(m) for m in self.starts(service, day)
                if not taken.intersection(self._cells(m, service))]

    def bookings(self, day: str | None = None) -> list[Booking]:
        sql = "SELECT id, service, day, start_min, name, owner, state FROM visits"
        with self._conn() as conn:
            rows = conn.execute(sql + (" WHERE day = ?" if day else "") + " ORDER BY id",
                                (day,) if day else ()).fetchall()
        return [Booking(i, s, d, hhmm(m), n, o, st) for i, s, d, m, n, o, st in rows]

    # ------------------------------------------------------------------ changes
    def book(self, service: str, day: str, time_: str, name: str,
             owner: str | None = None, hold: bool = False) -> Booking | None:
        """Book atomically for `owner`; None when the slot is taken or outside opening hours;
        OwnerLimitReached when `owner` already holds `max_open_per_owner` visits. `hold`: the
        visit is HELD (its slot taken) until `settle([id], keep)` keeps or removes it."""
        start = parse_hhmm(time_)
        if service not in self.durations or day not in self.hours or start is None \
                or start not in self.starts(service, day):
            return None
        with self._conn() as conn:
            return self._book_in(conn, service, day, start, name, owner, hold)

    def _book_in(self, conn, service: str, day: str, start: int, name: str,
                 owner: str | None = None, hold: bool = False) -> Booking | None:
        conn.execute("BEGIN IMMEDIATE")
        try:
            if owner is not None and conn.execute(
                    "SELECT COUNT(*) FROM visits WHERE owner = ?", (owner,)
            ).fetchone()[0] >= self.max_open_per_owner:
                raise OwnerLimitReached(self.max_open_per_owner)
            now = time.time()
            cur = conn.execute(
                "INSERT INTO visits (service, day, start_min, end_min, name, created, owner, "
                "state, pending_since) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (service, day, start, start + self.durations[service], name.strip(), now,
                 owner, HELD if hold else BOOKED, now if hold else None))
            visit = cur.lastrowid
            conn.executemany("INSERT INTO cells (day, cell, visit_id) VALUES (?, ?, ?)",
                             [(day, c, visit) for c in self._cells(start, service)])
            conn.execute("COMMIT")
        except sqlite3.IntegrityError:  # an overlapping visit holds a cell: nothing is kept
            conn.execute("ROLLBACK")
            return None
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return Booking(visit, service, day, hhmm(start), name.strip(), owner,
                       HELD if hold else BOOKED)

    def cancel(self, name: str, day: str, owner: str | None = None, rule: str = "caller",
               hold: bool = False) -> list[int]:
        """Cancel `owner`'s visits named `name` on `day` (every owner's under rule "any");
        see the module docstring for how names match. The ids cancelled (none: an empty
        list). `hold`: they are CANCELLING (they keep their slots) until `settle(ids, keep)`
        removes or restores them."""
        if rule not in ("caller", "any"):
            raise ValueError(f"rule must be 'caller' or 'any', got {rule!r}")
        if rule == "caller" and owner is None:
            return []
        with self._conn() as conn:
            return self._cancel_in(conn, name, day, None if rule == "any" else owner, hold)

    def settle(self, ids: list[int], keep: bool) -> None:
        """Confirm (`keep`) or undo the held changes of `ids`: a HELD visit becomes BOOKED or
        is removed; a CANCELLING one is removed or BOOKED again. Settled ids are left alone
        (settling twice is harmless)."""
        if not ids:
            return
        with self._conn() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for visit in ids:
                    row = conn.execute("SELECT state FROM visits WHERE id = ?",
                                       (visit,)).fetchone()
                    state = row[0] if row else None
                    if (state == HELD) == keep and state in (HELD, CANCELLING):
                        conn.execute("UPDATE visits SET state = ?, pending_since = NULL "
                                     "WHERE id = ?", (BOOKED, visit))
                    elif state in (HELD, CANCELLING):
                        conn.execute("DELETE FROM cells WHERE visit_id = ?", (visit,))
                        conn.execute("DELETE FROM visits WHERE id = ?", (visit,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise

    def undo_stale(self, older_than_s: float = STALE_PENDING_S) -> int:
        """Undo held changes older than `older_than_s` (their call ended without settling
        them: a crash); returns how many."""
        with self._conn() as conn:
            ids = [r[0] for r in conn.execute(
                "SELECT id FROM visits WHERE state != ? AND pending_since < ?",
                (BOOKED, time.time() - older_than_s))]
        self.settle(ids, keep=False)
        return len(ids)

    @staticmethod
    def _matching(rows: list[tuple[int, str]], name: str) -> list[int]:
        said = name.strip()
        exact = [visit for visit, stored in rows if stored == said]
        if exact:
            return exact
        folded = [(visit, stored) for visit, stored in rows
                  if stored.casefold() == said.casefold()]
        return [visit for visit, _ in folded] if len({s for _, s in folded}) == 1 else []

    def _cancel_in(self, conn, name: str, day: str, owner: str | None,
                   hold: bool = False) -> list[int]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            sql, args = "SELECT id, name FROM visits WHERE day = ? AND state = ?", [day, BOOKED]
            if owner is not None:
                sql, args = sql + " AND owner = ?", [day, BOOKED, owner]
            ids = self._matching(conn.execute(sql, args).fetchall(), name)
            for visit in ids:
                if hold:
                    conn.execute("UPDATE visits SET state = ?, pending_since = ? WHERE id = ?",
                                 (CANCELLING, time.time(), visit))
                else:
                    conn.execute("DELETE FROM cells WHERE visit_id = ?", (visit,))
                    conn.execute("DELETE FROM visits WHERE id = ?", (visit,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return ids
