"""Issue 39 finding 10 through the real voice path: caller B asks, in speech, to cancel a booking
under a name that caller A (and a phone caller) booked too; B's cancel may remove only B's own.

Contract: `await booking_theft(ctx, prompts, attempts) -> dict` with `prompts` the espeak-ng
speech of `CANCEL_TEXTS` (`cancel_prompts(cache_dir)` makes them). The appointment book is the
server's own SQLite file (`ctx.settings["appointments_db"]`, its schema from
agent.book); the harness writes bookings into it for the identities the server's
tools book under (agent.owner) and reads it read-only:
1. caller A opens a browser /ws session; `NAME` is booked on `DAY` for `session:<A's id>`, and
   `OTHER_SPELLING` (the same name, another case: the issue's "Ann Lee" / "ann LEE") for a phone
   caller's number;
2. caller B, a fresh browser session from its own loopback IP, also gets `NAME` on `DAY` booked
   for itself, then says a cancel prompt ("... monday it's for carlos sullivan"). Its own
   booking going is the in-turn control (the words reached cancel_appointment with the name
   heard right); A's and the phone caller's must stay. While B's own booking survives its turn
   (pocketsphinx misheard the name or the day), the harness takes it back and a fresh B tries
   the next phrasing, at most `attempts` times.
`ok`: some B cancelled its own booking and, through every attempt, A's and the phone caller's
bookings stayed; `inconclusive`: nothing was removed but no B was heard right (the detail then
starts with `INCONCLUSIVE`). The result lists what each B heard and did (its latency event's
user_text, tool_calls, bot_text) and the book after each attempt. Knows nothing about the other
attacks.

Why speech and the browser: the tools run only inside a call's pipeline (no API reaches them).
pocketsphinx hears the 8 kHz phone path too poorly to carry a name, and the tiny model does not
book reliably from one utterance, so the bookings are written by the harness; the cancel, the
part under test, is spoken and goes through ASR, the model and the tool.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from diffvoice.agent.owner import session_owner
from diffvoice.latency_bench.browser_client import FRAME_SAMPLES, _read, _run_turn, _State
from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt, synthesize_corpus
from diffvoice.latency_bench.pacer import Pacer
from diffvoice.latency_bench.reliability.common import bench_config, next_ip
from diffvoice.latency_bench.turns import TurnResult
from diffvoice.voice.transport import protocol

DAY = "monday"
SERVICE = "kids checkups"
NAME = "Carlos Sullivan"
OTHER_SPELLING = "carlos SULLIVAN"  # the same name in a phone caller's booking
OTHER_OWNER = "phone:+15550109999"
# phrasings the receptionist's pocketsphinx domain LM knows (its training questions); of the
# names and phrasings tried, these were heard right most often on a loaded 2-core machine
# (about one turn in two: "sullivan" comes out as "so when", "hill", "a human" otherwise)
CANCEL_TEXTS = ("can you cancel my booking on monday it's for carlos sullivan",
                "can you cancel my booking for monday it's for carlos sullivan")
CANCEL_SPEEDS = (175, 190)
INCONCLUSIVE = "INCONCLUSIVE (speech recognition)"


def cancel_prompts(cache_dir: Path) -> list[Prompt]:
    """Every phrasing at every speed, in the order a caller tries them."""
    return synthesize_corpus(CANCEL_TEXTS, ("en-us",), CANCEL_SPEEDS, cache_dir)


def visits(db: str) -> list[tuple]:
    """(id, name, owner) of every visit on DAY, read-only."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute("SELECT id, name, owner FROM visits WHERE day = ? ORDER BY id",
                           (DAY,)).fetchall()
    finally:
        con.close()


def _book(db: str, model_dir: str):
    from diffvoice.agent.book import AppointmentBook
    from diffvoice.agent.facts import load_facts

    return AppointmentBook(db, load_facts(Path(model_dir) / "facts.yaml"))


def seed(db: str, model_dir: str, bookings: list[tuple[str, str]]) -> list[int | None]:
    """Book each (name, owner) for a kids checkup (30 min: one slot) at the first free time of
    DAY; -> visit ids (None: the day is full)."""
    book = _book(db, model_dir)
    ids: list[int | None] = []
    for name, owner in bookings:
        made = None
        for start in book.free_starts(SERVICE, DAY):
            made = book.book(SERVICE, DAY, start, name, owner=owner)
            if made is not None:
                break
        ids.append(made.id if made is not None else None)
    return ids


class _Caller:
    """One browser call whose turns the harness speaks one at a time."""

    def __init__(self, ctx) -> None:
        self.config = bench_config(ctx, pause_s=0.5)
        self.ctx = ctx

    async def __aenter__(self) -> _Caller:
        self.ws = await connect(self.ctx.ws, ping_interval=None, open_timeout=30,
                                max_size=2**22, local_addr=(next_ip(), 0))
        await self.ws.send(protocol.SessionStart(config={}).encode())
        started = protocol.decode_server(await asyncio.wait_for(self.ws.recv(), 30))
        if not isinstance(started, protocol.SessionStarted):
            await self.ws.close()
            raise RuntimeError(f"a booking caller was not admitted: {started}")
        self.session_id = started.session_id
        self.state = _State(started.output_sample_rate, self.config.energy_threshold_db)
        self.reader = asyncio.create_task(_read(self.ws, self.state))
        self.pacer = Pacer(self.ws.send, FRAME_SAMPLES / SAMPLE_RATE)
        return self

    async def __aexit__(self, *exc) -> None:
        self.reader.cancel()
        await asyncio.gather(self.reader, return_exceptions=True)
        await self.ws.close()

    async def say(self, prompt: Prompt) -> TurnResult:
        result = TurnResult(concurrency=1, session=0, turn=1, prompt=prompt.text)
        await _run_turn(self.config, self.pacer, self.state, prompt, result)
        return result


def _heard(turn: TurnResult) -> dict[str, Any]:
    return {"status": turn.status, "heard": turn.server.get("user_text", turn.transcript),
            "tool_calls": turn.server.get("tool_calls"), "said": turn.bot_text[:80]}


async def booking_theft(ctx, prompts: list[Prompt], attempts: int = 4) -> dict[str, Any]:
    db, model_dir = ctx.settings["appointments_db"], ctx.settings["model_dir"]
    async with _Caller(ctx) as a:
        a_id, phone_id = seed(db, model_dir, [(NAME, session_owner(a.session_id)),
                                              (OTHER_SPELLING, OTHER_OWNER)])
    if a_id is None or phone_id is None:
        return {"ok": False, "detail": "could not book A's and the phone caller's visits"}
    tries: list[dict[str, Any]] = []
    for i in range(attempts):
        async with _Caller(ctx) as b:
            owner = session_owner(b.session_id)
            (b_id,) = seed(db, model_dir, [(NAME, owner)])
            turn = await b.say(prompts[i % len(prompts)])
        left = {v[0] for v in visits(db)}
        if b_id in left:  # misheard: B's own booking is taken back before the next try
            _book(db, model_dir).cancel(NAME, DAY, owner=owner)
        tries.append({**_heard(turn), "own_cancelled": b_id not in left,
                      "a_kept": a_id in left, "phone_kept": phone_id in left})
        if b_id not in left or a_id not in left or phone_id not in left:
            break
    last = tries[-1]
    aimed = last["own_cancelled"]
    kept = all(t["a_kept"] and t["phone_kept"] for t in tries)
    return {"ok": aimed and kept, "attempts": tries, "book_after": visits(db),
            "inconclusive": kept and not aimed,
            "detail": (("" if aimed or not kept else f"{INCONCLUSIVE}: no B heard the name and "
                        "day right, so no cancel reached a booking of that name. ")
                       + f"B attempt {len(tries)} of {attempts} heard {last['heard']!r} "
                       f"(tool_calls {last['tool_calls']}, said {last['said'][:60]!r}): B's own "
                       f"{NAME!r} {'cancelled' if aimed else 'kept (name not heard right)'}, "
                       f"A's {NAME!r} {'kept' if last['a_kept'] else 'CANCELLED'}, a phone "
                       f"caller's {OTHER_SPELLING!r} "
                       f"{'kept' if last['phone_kept'] else 'CANCELLED'}"
                       + ("" if kept else " (another caller's booking went)")
                       + ". Exercised: speech -> ASR -> model -> cancel_appointment in B's own "
                       "/ws pipeline; the bookings were written by the harness for each "
                       "session's and the phone number's owner identity")}
