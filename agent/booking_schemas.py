"""The receptionist's tools as the product decodes them: the training schemas, narrowed.

    decoding_schemas(facts, context=True) -> OpenAI `tools` list
Same names, properties and wire order as agent.tool_schemas.tool_schemas (what the model
was trained to emit), with each value slot constrained to what the appointment book can accept:
  day      enum of the fact sheet's OPEN weekdays (closed days cannot be booked)
  time     enum of the book's start times: every open day's hours on the 30-minute grid
           (tool_schemas.slot_times; "08:00" ... "16:30"), nullable in check_availability
  service  enum of the fact sheet's services (unchanged), with their aliases
  name     free text, maxLength 40 (unchanged)
and, with `context=True` (the default; what serve / the API / eval-model use), the conversation
narrowing of engine/constrained/context.py: service, day and time "mentioned" (only values
somebody said, when any was; a service also by its fact-sheet aliases and spoken name; a tool
waits while a required one was never said), name "name_span" (copied from the caller's words).
`context=False` gives the schema-only constraint (for measuring what the narrowing adds). Knows
nothing about models.
"""

from __future__ import annotations

import copy

from diffvoice.agent.facts import DAYS, FactSheet, service_aliases
from diffvoice.agent.tool_schemas import slot_times, tool_schemas
from diffvoice.engine.constrained.context import ALIASES_KEY, KEY


def open_days(facts: FactSheet) -> list[str]:
    hours = dict(facts.hours)
    return [d for d in DAYS if hours.get(d, "closed") != "closed"]


def grid_times(facts: FactSheet) -> list[str]:
    hours = dict(facts.hours)
    return sorted({t for d in open_days(facts) for t in slot_times(hours[d])})


def decoding_schemas(facts: FactSheet, context: bool = True) -> list[dict]:
    tools = copy.deepcopy(tool_schemas(facts))
    days, times = open_days(facts), grid_times(facts)
    if not days or not times:
        raise ValueError("the fact sheet has no open day: nothing can be booked")
    for tool in tools:
        props = tool["function"]["parameters"]["properties"]
        for key, spec in props.items():
            if key == "day":
                spec["enum"] = list(days)
            elif key == "time":
                spec.pop("pattern", None)
                nullable = isinstance(spec.get("type"), list)
                spec["enum"] = list(times) + ([None] if nullable else [])
            if context and key in ("day", "time"):
                spec[KEY] = "mentioned"
            elif context and key == "service":
                spec[KEY] = "mentioned"
                spec[ALIASES_KEY] = service_aliases(facts)
            elif context and key == "name":
                spec[KEY] = "name_span"
    return tools
