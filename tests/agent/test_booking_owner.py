"""Issue 39, item 10: bookings belong to the caller. A cancel touches only the calling phone
number's or browser session's own bookings (unless the deployer chose booking_owner_rule
"any"), names are compared exactly per owner, and a book made before owners existed opens."""

from __future__ import annotations

import sqlite3

import pytest
from book_facts import facts_file  # noqa: E402

from diffvoice.agent.book import AppointmentBook
from diffvoice.agent.facts import load_facts
from diffvoice.agent.tools import ReceptionistTools

A, B = "session:caller-a", "session:caller-b"


@pytest.fixture
def facts(tmp_path):
    return load_facts(facts_file(tmp_path))


@pytest.fixture
def tools(tmp_path, facts):
    return ReceptionistTools(AppointmentBook(tmp_path / "book.sqlite3", facts), facts)


def book(tools, name: str, time: str, caller: str | None, day: str = "friday") -> dict:
    return tools.call("book_appointment", {"service": "cleanings", "day": day, "time": time,
                                           "name": name}, caller=caller)


def cancel(tools, name: str, caller: str | None, day: str = "friday") -> dict:
    return tools.call("cancel_appointment", {"name": name, "day": day}, caller=caller)


def left(tools) -> list[tuple[str, str]]:
    return [(b.time, b.name) for b in tools.book.bookings()]


def test_caller_b_cannot_cancel_caller_a_booking(tools):
    assert book(tools, "Ann Lee", "10:00", A) == {"booked": True}
    # B says exactly what A would: refused, and told no more than "not found"
    assert cancel(tools, "Ann Lee", B) == {"cancelled": False}
    assert cancel(tools, "ann lee", B) == {"cancelled": False}
    assert cancel(tools, "Ann Lee", None) == {"cancelled": False}  # no owner: nothing
    assert left(tools) == [("10:00", "Ann Lee")]
    assert cancel(tools, "Ann Lee", A) == {"cancelled": True}
    assert left(tools) == []


def test_one_cancel_removes_only_the_callers_exact_booking(tools):
    assert book(tools, "Ann Lee", "10:00", A) == {"booked": True}
    assert book(tools, "ann LEE", "11:00", B) == {"booked": True}  # stored as said
    assert [b.name for b in tools.book.bookings()] == ["Ann Lee", "ann LEE"]
    # A's own booking matches case-insensitively within A's bookings only
    assert cancel(tools, "ann lee", A) == {"cancelled": True}
    assert left(tools) == [("11:00", "ann LEE")]


def test_within_one_owner_an_exact_name_wins_over_a_case_insensitive_one(tools):
    assert book(tools, "Ann Lee", "10:00", A) == {"booked": True}
    assert book(tools, "ann LEE", "11:00", A) == {"booked": True}
    assert cancel(tools, "ann LEE", A) == {"cancelled": True}
    assert left(tools) == [("10:00", "Ann Lee")]
    assert cancel(tools, "ANN LEE", A) == {"cancelled": True}  # one spelling left: it
    assert left(tools) == []


def test_a_phone_caller_cancels_their_own_booking_from_the_same_number(tools):
    from diffvoice.agent.owner import phone_owner

    first_call = phone_owner("+15550100", "CA" + "1" * 32)
    later_call = phone_owner("+15550100", "CA" + "2" * 32)
    other_number = phone_owner("+15550111", "CA" + "3" * 32)
    assert first_call == later_call == "phone:+15550100"
    assert book(tools, "Ann Lee", "10:00", first_call) == {"booked": True}
    assert cancel(tools, "Ann Lee", other_number) == {"cancelled": False}
    assert cancel(tools, "ann lee", later_call) == {"cancelled": True}
    # a withheld number is no shared identity: such a booking is its own call's alone
    anonymous = [phone_owner("+266696687", "CA" + c * 32) for c in "45"]
    assert anonymous[0] != anonymous[1]
    assert book(tools, "Bo Chen", "12:00", anonymous[0]) == {"booked": True}
    assert cancel(tools, "Bo Chen", anonymous[1]) == {"cancelled": False}
    assert cancel(tools, "Bo Chen", anonymous[0]) == {"cancelled": True}


def test_the_owner_never_comes_from_the_arguments(tools):
    assert book(tools, "Ann Lee", "10:00", A) == {"booked": True}
    sneaky = tools.call("cancel_appointment", {"name": "Ann Lee", "day": "friday",
                                               "caller": A}, caller=B)
    assert "error" in sneaky and left(tools) == [("10:00", "Ann Lee")]


def _old_book(path) -> None:
    """The schema before owners (a2ae0bd), with one booking in it."""
    with sqlite3.connect(path) as conn:
        conn.executescript("""
            CREATE TABLE visits (id INTEGER PRIMARY KEY, service TEXT NOT NULL,
                day TEXT NOT NULL, start_min INTEGER NOT NULL, end_min INTEGER NOT NULL,
                name TEXT NOT NULL, created REAL NOT NULL);
            CREATE TABLE cells (day TEXT NOT NULL, cell INTEGER NOT NULL,
                visit_id INTEGER NOT NULL REFERENCES visits(id) ON DELETE CASCADE,
                PRIMARY KEY (day, cell));
            INSERT INTO visits VALUES (1, 'cleanings', 'friday', 600, 645, 'Ann Lee', 0);
            INSERT INTO cells VALUES ('friday', 20, 1), ('friday', 21, 1);
        """)


def test_an_old_book_migrates_and_its_bookings_are_nobodys(tmp_path, facts):
    path = tmp_path / "old.sqlite3"
    _old_book(path)
    tools = ReceptionistTools(AppointmentBook(path, facts), facts)
    assert left(tools) == [("10:00", "Ann Lee")]
    assert "10:00" not in tools.book.free_starts("cleanings", "friday")  # still holds its slot
    assert cancel(tools, "Ann Lee", A) == {"cancelled": False}  # NULL owner: nobody's
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(visits)")]
    assert "owner" in columns
    assert book(tools, "Bo Chen", "12:00", A) == {"booked": True}  # new rows get an owner
    assert [b.owner for b in tools.book.bookings()] == [None, A]
    again = AppointmentBook(path, facts)  # a second open finds the column: nothing to do
    # the deployer's "any" rule: anyone who names the booking and its day may cancel it
    front_desk = ReceptionistTools(again, facts, owner_rule="any")
    assert cancel(front_desk, "Ann Lee", B) == {"cancelled": True}
    assert left(front_desk) == [("12:00", "Bo Chen")]


def test_the_any_rule_refuses_a_name_that_is_only_ambiguously_spelled(tools, facts):
    front_desk = ReceptionistTools(tools.book, facts, owner_rule="any")
    assert book(tools, "Ann Lee", "10:00", A) == {"booked": True}
    assert book(tools, "ann LEE", "11:00", B) == {"booked": True}
    assert cancel(front_desk, "ann lee", None) == {"cancelled": False}  # two spellings
    assert cancel(front_desk, "ann LEE", None) == {"cancelled": True}  # exact: B's
    assert left(tools) == [("10:00", "Ann Lee")]


def test_the_rule_is_a_validated_serve_setting(tmp_path):
    from diffvoice.voice.config import ServeConfig

    assert ServeConfig().booking_owner_rule == "caller"
    assert ServeConfig(booking_owner_rule="any").booking_owner_rule == "any"
    with pytest.raises(ValueError, match="booking_owner_rule"):
        ServeConfig(booking_owner_rule="anyone")
    with pytest.raises(ValueError, match="owner_rule"):
        ReceptionistTools.for_model(tmp_path, db_path=tmp_path / "b.sqlite3",
                                    facts_path=facts_file(tmp_path), owner_rule="anyone")


def test_one_owner_cannot_book_the_whole_week(tools):
    """Issue 54 N13: one caller booked all 47 starts of the week. Past
    `max_open_bookings_per_owner` (3 by default) the tool answers an error the agent can say;
    other callers still book, and a cancel frees the owner's slot again."""
    limit = tools.book.max_open_per_owner
    assert limit == 3
    times = ["09:00", "10:00", "11:00", "13:00", "14:00"]
    results = [book(tools, f"Ann {i}", t, A) for i, t in enumerate(times)]
    assert results[:limit] == [{"booked": True}] * limit
    refusal = results[limit]
    assert set(refusal) == {"error"} and "3 appointments" in refusal["error"]
    assert len(tools.book.bookings()) == limit  # nothing more was written
    assert book(tools, "Bo", "13:30", B) == {"booked": True}  # another caller is not affected
    assert cancel(tools, "Ann 0", A) == {"cancelled": True}
    assert book(tools, "Ann 9", "12:00", A) == {"booked": True}


def test_the_owner_cap_is_configurable_and_checked(tmp_path, facts):
    book_ = AppointmentBook(tmp_path / "b.sqlite3", facts, max_open_per_owner=1)
    assert book_.book("cleanings", "friday", "09:00", "A", owner=A) is not None
    with pytest.raises(ValueError, match="max_open_per_owner"):
        AppointmentBook(tmp_path / "c.sqlite3", facts, max_open_per_owner=0)
    tools = ReceptionistTools(book_, facts)
    assert "error" in book(tools, "A2", "10:00", A)
    assert book(tools, "N", "11:00", None) == {"booked": True}  # no owner: nobody's, uncapped
