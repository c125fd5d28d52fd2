"""The receptionist's three tools over the appointment book, for the engine and for pipecat.

    tools = ReceptionistTools.for_model(model_dir, db_path=None,   # facts.yaml of the model
                                        owner_rule="caller")
    tools.schemas                        # OpenAI `tools` list: agent.booking_schemas
                                         # (open days, the book's start times, names copied
                                         # from the caller's words)
    tools.call("book_appointment", {...}, caller=owner) -> result dict (the `tool` message
                                         # the model reads)
    tools.register(llm, caller=owner)    # pipecat: llm.register_function for each tool
    tools.tools_schema()                 # pipecat ToolsSchema for an LLMContext
Results are exactly what the model is trained to read (agent/tool_schemas.py):
  check_availability  {"available": [up to 3 free start times]}  (a free asked-for time first,
                      then the nearest ones; without a time the earliest)
  book_appointment    {"booked": true} | {"booked": false, "alternatives": [up to 3]}
  cancel_appointment  {"cancelled": true} | {"cancelled": false}
  bad arguments       {"error": "<short text>"}
  (the caller already holds AppointmentBook.max_open_per_owner visits: book_appointment answers
  {"error": "you already have N appointments booked, ..."}, a sentence the agent can say)
The database defaults to `default_book_path(model dir)`, in the user's data directory (created on
first run).

`caller` is the session's owner identity (agent.owner: the phone number, the /ws
session), handed in by whoever runs the tools, never taken from the model's arguments (an
argument the tool's schema does not name is an error). A booking is stored under it; with
`owner_rule="caller"` (default) a cancel only touches the caller's own bookings (no caller:
none), with "any" everyone's (AppointmentBook.cancel). A refused cancel reads exactly like one
that found nothing, {"cancelled": false}: a caller learns nothing about others' bookings.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import platformdirs

from diffvoice.agent.book import (
    DAYS,
    MAX_OPEN_PER_OWNER,
    AppointmentBook,
    OwnerLimitReached,
    parse_hhmm,
)
from diffvoice.agent.owner import OWNER_RULES

MAX_OFFERED = 3
Hold = Callable[[list[int]], bool]  # takes held visit ids; False: undo them now
log = logging.getLogger(__name__)
UNAVAILABLE = "the appointment book is not available right now, please try again later"
DB_FILENAME = "appointments.sqlite3"


def served_tool_schemas(model_dir: str | Path, facts_path: str | Path | None = None) -> list[dict]:
    """The receptionist's tools exactly as `diffvoice serve` decodes them (OpenAI `tools`): the
    fact sheet's open days and the book's start times as enums, and the conversation slots
    (engine.constrained.context). What an API client should send (`diffvoice tools --model
    DIR` prints them); the server also swaps them in for a request that sends the plain tools
    of docs/tool-calling.md (same names and arguments)."""
    from diffvoice.agent.booking_schemas import decoding_schemas
    from diffvoice.agent.facts import load_facts

    return decoding_schemas(load_facts(facts_path or Path(model_dir) / "facts.yaml"))


def default_book_path(model_dir: str | Path) -> Path:
    """Where a model's appointment book lives unless told otherwise: the user's data
    directory (platformdirs: ~/.local/share/diffvoice/<model>/ on Linux), never the model
    directory, which after a wheel install is inside site-packages."""
    return platformdirs.user_data_path("diffvoice") / Path(model_dir).resolve().name / DB_FILENAME


class ReceptionistTools:
    def __init__(self, book: AppointmentBook, facts, owner_rule: str = "caller") -> None:
        from diffvoice.agent.booking_schemas import decoding_schemas

        if owner_rule not in OWNER_RULES:
            raise ValueError(f"owner_rule must be one of {OWNER_RULES}, got {owner_rule!r}")
        self.book = book
        self.facts = facts
        self.owner_rule = owner_rule
        self.schemas = decoding_schemas(facts)
        self.names = tuple(t["function"]["name"] for t in self.schemas)
        self._arguments = {t["function"]["name"]: frozenset(t["function"]["parameters"]
                                                            ["properties"])
                           for t in self.schemas}

    @classmethod
    def for_model(cls, model_dir: str | Path, db_path: str | Path | None = None,
                  facts_path: str | Path | None = None,
                  owner_rule: str = "caller",
                  max_open_per_owner: int = MAX_OPEN_PER_OWNER) -> ReceptionistTools:
        from diffvoice.agent.facts import load_facts

        model_dir = Path(model_dir)
        facts = load_facts(facts_path or model_dir / "facts.yaml")
        book = AppointmentBook(db_path or default_book_path(model_dir), facts,
                               max_open_per_owner=max_open_per_owner)
        return cls(book, facts, owner_rule=owner_rule)

    def same_tools(self, tools) -> bool:
        """Are a request's `tools` these tools (the same function names, each with the same
        argument names), whatever their schemas say? Then the served schemas decode them."""
        try:
            theirs = {t["function"]["name"]: frozenset(t["function"]["parameters"]["properties"])
                      for t in tools}
        except (KeyError, TypeError):
            return False
        return len(theirs) == len(tools) and theirs == self._arguments

    # ------------------------------------------------------------------ the tools
    def _check(self, args: dict[str, Any], need_time: bool) -> str | None:
        if args.get("service") not in self.book.durations:
            return f"unknown service {args.get('service')!r}"
        if args.get("day") not in DAYS:
            return f"unknown day {args.get('day')!r}"
        time_ = args.get("time")
        if (need_time or time_ is not None) and parse_hhmm(time_ or "") is None:
            return f"time must be HH:MM, got {time_!r}"
        return None

    def _nearest(self, service: str, day: str, time_: str | None) -> list[str]:
        free = self.book.free_starts(service, day)
        if time_ is not None:
            want = parse_hhmm(time_)
            free.sort(key=lambda t: (abs(parse_hhmm(t) - want), parse_hhmm(t)))
        return free[:MAX_OFFERED]

    def check_availability(self, service: str, day: str, time: str | None = None) -> dict:
        error = self._check({"service": service, "day": day, "time": time}, need_time=False)
        if error:
            return {"error": error}
        return {"available": self._nearest(service, day, time)}

    def book_appointment(self, service: str, day: str, time: str, name: str, *,
                         caller: str | None = None, hold: Hold | None = None) -> dict:
        error = self._check({"service": service, "day": day, "time": time}, need_time=True)
        if error or not isinstance(name, str) or not name.strip():
            return {"error": error or "a name is needed"}
        try:
            booked = self.book.book(service, day, time, name, owner=caller,
                                    hold=hold is not None)
        except OwnerLimitReached as e:
            return {"error": f"you already have {e.limit} appointments booked, the most one "
                             f"caller may hold; cancel one to book another"}
        if booked is not None:
            self._held(hold, [booked.id])
            return {"booked": True}
        return {"booked": False, "alternatives": [
            t for t in self._nearest(service, day, time) if t != time][:MAX_OFFERED]}

    def cancel_appointment(self, name: str, day: str, *, caller: str | None = None,
                           hold: Hold | None = None) -> dict:
        if day not in DAYS or not isinstance(name, str) or not name.strip():
            return {"error": "a name and a weekday are needed"}
        ids = self.book.cancel(name, day, owner=caller, rule=self.owner_rule,
                               hold=hold is not None)
        self._held(hold, ids)
        return {"cancelled": bool(ids)}

    def _held(self, hold: Hold | None, ids: list[int]) -> None:
        """Hand held changes to their keeper; one it refuses (the reply they belong to was
        already discarded) is undone at once."""
        if hold is not None and ids and not hold(ids):
            self.book.settle(ids, keep=False)

    def settle(self, ids: list[int], keep: bool) -> None:
        """Confirm or undo held changes (AppointmentBook.settle)."""
        self.book.settle(ids, keep)

    def call(self, name: str, arguments: dict[str, Any], *, caller: str | None = None,
             hold: Hold | None = None) -> dict:
        """Run one tool by name for `caller` (unknown tools and bad arguments give
        {"error": ...}; only the schema's own arguments are accepted). `hold`: the change a
        booking or cancellation makes is held (agent.book: HELD / CANCELLING) and its ids
        handed to `hold(ids)`, whose owner settles them; `hold` returning False undoes them
        at once."""
        if name not in self.names or not isinstance(arguments, dict):
            return {"error": f"unknown tool {name!r}"}
        unexpected = sorted(str(k) for k in set(arguments) - self._arguments[name])
        if unexpected:
            return {"error": f"unexpected argument {unexpected[0][:40]!r}"}
        owned = {"caller": caller} if name != "check_availability" else {}
        if hold is not None and name != "check_availability":
            owned["hold"] = hold
        try:
            return getattr(self, name)(**arguments, **owned)
        except TypeError as exc:  # missing arguments
            return {"error": str(exc).split(") ", 1)[-1]}

    # ------------------------------------------------------------------ pipecat
    def tools_schema(self):
        from pipecat.adapters.llm.schemas.function_schema import FunctionSchema
        from pipecat.adapters.llm.schemas.tools_schema import ToolsSchema

        return ToolsSchema(standard_tools=[FunctionSchema(
            name=t["function"]["name"], description=t["function"]["description"],
            properties=t["function"]["parameters"]["properties"],
            required=t["function"]["parameters"]["required"]) for t in self.schemas])

    def register(self, llm, *, caller: str | None = None,
                 cancel_on_interruption: bool = True, ledger=None) -> None:
        """Register every tool on a pipecat LLMService for one session's `caller` (the
        session's owner identity; the book runs in a worker thread). `ledger` (a
        voice.tool_ledger.ToolLedger): bookings and cancellations are held until the caller
        hears the reply that confirms them (`ledger.holder()` for each call)."""
        for name in self.names:
            async def handler(params, _name=name):
                hold = ledger.holder(params.tool_call_id) if ledger is not None else None
                try:
                    result = await asyncio.to_thread(self.call, _name, dict(params.arguments),
                                                     caller=caller, hold=hold)
                except Exception as e:  # the book failed: the model says so, never silence
                    log.warning("%s failed: %r", _name, e)
                    result = {"error": UNAVAILABLE}
                await params.result_callback(result)

            llm.register_function(name, handler, cancel_on_interruption=cancel_on_interruption)
