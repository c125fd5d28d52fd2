"""The appointment book: slots from the fact sheet, real SQLite file, restart survival, and no
double booking under concurrent threads and processes."""

from __future__ import annotations

import multiprocessing
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from book_facts import facts_file  # noqa: E402

from diffvoice.agent.book import AppointmentBook, duration_minutes  # noqa: E402
from diffvoice.agent.facts import load_facts  # noqa: E402
from diffvoice.agent.tools import ReceptionistTools  # noqa: E402


@pytest.fixture
def facts(tmp_path):
    return load_facts(facts_file(tmp_path))


def test_durations_parse_or_fail_clearly():
    assert [duration_minutes(t, "x") for t in ("45 minutes", "1 hour", "90 minutes",
                                                "1.5 hours")] == [45, 60, 90, 90]
    with pytest.raises(ValueError, match="services.crowns"):
        duration_minutes("2 visits", "services.crowns")


def test_slots_follow_opening_hours_and_durations(tmp_path, facts):
    book = AppointmentBook(tmp_path / "a.sqlite3", facts)
    hours = dict(facts.hours)
    assert hours["friday"] == "8 am to 3 pm" and hours["sunday"] == "closed"
    assert book.free_starts("cleanings", "sunday") == []
    friday = book.free_starts("cleanings", "friday")  # 45 minutes, must end by 15:00
    assert friday[0] == "08:00" and friday[-1] == "14:00" and "14:30" not in friday
    assert all(t.endswith((":00", ":30")) for t in friday)
    whitening = book.free_starts("teeth whitening", "friday")  # 90 minutes
    assert whitening[-1] == "13:30"


def test_booking_blocks_every_overlapping_start_and_cancel_frees_them(tmp_path, facts):
    book = AppointmentBook(tmp_path / "a.sqlite3", facts)
    assert book.book("cleanings", "friday", "10:00", "ann lee", owner="a")  # cells 10:00, 10:30
    free = book.free_starts("cleanings", "friday")
    assert "10:00" not in free and "10:30" not in free and "09:30" not in free  # 9:30 runs to 10:15
    assert "09:00" in free and "11:00" in free
    assert book.book("fillings", "friday", "09:30", "bo") is None  # would overlap
    assert book.book("cleanings", "friday", "10:15", "bo") is None  # off the grid
    assert book.book("cleanings", "sunday", "10:00", "bo") is None  # closed
    assert not book.cancel("nobody", "friday", owner="a")
    assert book.cancel("Ann Lee ", "friday", owner="a")
    assert "10:00" in book.free_starts("cleanings", "friday")


def test_bookings_survive_a_restart(tmp_path, facts):
    path = tmp_path / "sub" / "book.sqlite3"
    book = AppointmentBook(path, facts)
    assert path.is_file()  # created on first run
    assert book.book("crowns", "monday", "08:00", "cy")
    book.close()
    again = AppointmentBook(path, facts)
    assert [(b.service, b.day, b.time, b.name) for b in again.bookings()] == [
        ("crowns", "monday", "08:00", "cy")]
    assert "08:00" not in again.free_starts("crowns", "monday")


def test_threads_cannot_double_book(tmp_path, facts):
    book = AppointmentBook(tmp_path / "a.sqlite3", facts)
    results, barrier = [], threading.Barrier(12)

    def caller(i):
        barrier.wait(10)
        results.append(book.book("cleanings", "tuesday", "11:00", f"caller {i}"))

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sum(r is not None for r in results) == 1 and len(results) == 12
    assert len(book.bookings("tuesday")) == 1


def _book_in_process(path, facts_path, i, start, out):
    book = AppointmentBook(path, load_facts(facts_path))
    start.wait(30)
    out.put(book.book("fillings", "wednesday", "13:00", f"proc {i}") is not None)


def test_processes_cannot_double_book(tmp_path):
    path, fpath = tmp_path / "a.sqlite3", facts_file(tmp_path)
    AppointmentBook(path, load_facts(fpath))
    ctx = multiprocessing.get_context("fork")  # no re-import of torch in each child
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_book_in_process, args=(path, fpath, i, start, out))
             for i in range(4)]
    for p in procs:
        p.start()
    start.set()
    got = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert sorted(got) == [False, False, False, True]


def test_tools_return_what_the_model_reads(tmp_path, facts):
    tools = ReceptionistTools(AppointmentBook(tmp_path / "a.sqlite3", facts), facts)
    assert [t["function"]["name"] for t in tools.schemas] == [
        "check_availability", "book_appointment", "cancel_appointment"]
    assert tools.call("check_availability", {"service": "cleanings", "day": "friday",
                                             "time": "10:00"}) == {
        "available": ["10:00", "09:30", "10:30"]}
    assert tools.call("check_availability", {"service": "cleanings", "day": "friday",
                                             "time": None})["available"] == [
        "08:00", "08:30", "09:00"]
    assert tools.call("book_appointment", {"service": "cleanings", "day": "friday",
                                           "time": "10:00", "name": "ann lee"},
                      caller="session:a") == {"booked": True}
    second = tools.call("book_appointment", {"service": "cleanings", "day": "friday",
                                             "time": "10:00", "name": "bo"})
    assert second["booked"] is False and second["alternatives"] == ["09:00", "11:00", "08:30"]
    assert tools.call("cancel_appointment", {"name": "ann lee", "day": "friday"},
                      caller="session:a") == {"cancelled": True}
    assert tools.call("cancel_appointment", {"name": "ann lee", "day": "friday"},
                      caller="session:a") == {"cancelled": False}
    assert "error" in tools.call("book_appointment", {"service": "massage", "day": "friday",
                                                      "time": "10:00", "name": "x"})
    assert "error" in tools.call("nope", {})
    assert "error" in tools.call("cancel_appointment", {"name": "x"})


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc (Linux)")
def test_no_file_descriptor_outlives_an_operation_on_pool_threads(tmp_path, facts):
    """The server runs tools with asyncio.to_thread: long-lived pool threads. A connection kept
    per thread held 2 fds (db + WAL) per pool thread for the life of the process — the storm's
    fds 22 -> 26 (docs/reliability.md)."""
    book = AppointmentBook(tmp_path / "a.sqlite3", facts)
    tools = ReceptionistTools(book, facts)
    before = _open_fds()
    with ThreadPoolExecutor(4) as pool:  # kept alive while the fds are counted, like the server's
        barrier = threading.Barrier(4)

        def call(i: int):
            barrier.wait(10)  # all four threads in use, one operation each
            return tools.call("check_availability", {"service": "cleanings", "day": "friday",
                                                     "time": None})

        results = list(pool.map(call, range(4)))
        assert all("error" not in r for r in results), results
        assert book.book("cleanings", "monday", "09:00", "ann lee", owner="a")
        assert book.cancel("ann lee", "monday", owner="a") and book.bookings() == []
        assert _open_fds() == before, "a connection outlived its operation"
