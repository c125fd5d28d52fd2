"""The receptionist's tools as the embedded model is trained on them: schemas, wire text, results.

One place for everything both sides must agree on (the training data here, the engine's tool-call
mode and the appointment book in voice/): built from a fact sheet, so a retrained model for another
business gets its own service enum.

  tool_schemas(facts)            -> OpenAI `tools` list (type "function"), properties in wire order
  tool_call_text(name, args, schemas) -> the exact Hermes/Qwen2.5 wire text of one call:
      <tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>
      json.dumps(ensure_ascii=False, default separators), keys in `properties` order, every
      property present, a missing optional value as null
  parse_tool_call(text)          -> (name, args) or None
  result_text(obj)               -> the `tool` message content the model was trained to read
  spoken_time("14:30") -> "2:30 pm";  slot_times(hours) -> ["08:00", "08:30", ...]

Tool results the model was trained to read (JSON object text, `json.dumps` default separators):
  check_availability  {"available": ["10:00", "11:30"]}       free start times, 0-3 of them
  book_appointment    {"booked": true}  |  {"booked": false, "alternatives": ["11:30"]}  (0-3)
  cancel_appointment  {"cancelled": true}  |  {"cancelled": false}
  any tool            {"error": "<short text>"}
Argument values: service = a service `name` of the fact sheet; day = lowercase weekday name;
time = "HH:MM" 24 h; name = the caller's name as the chat template renders user text (lower case).
Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import json
import re

from diffvoice.agent.facts import DAYS, FactSheet

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
TOOL_NAMES = ("check_availability", "book_appointment", "cancel_appointment")
_TIME_RE = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")
_CALL_RE = re.compile(r"<tool_call>\s*(\{.*\})\s*</tool_call>", re.S)


def tool_schemas(facts: FactSheet) -> list[dict]:
    """OpenAI-style function tools; `properties` order is the argument order on the wire."""
    service = {"type": "string", "enum": [s.name for s in facts.services],
               "description": "the service to book"}
    day = {"type": "string", "enum": list(DAYS), "description": "weekday, lower case"}
    time = {"type": "string", "pattern": _TIME_RE.pattern, "description": "start time, HH:MM 24h"}
    name = {"type": "string", "maxLength": 40, "description": "the caller's name"}

    def fn(fname: str, desc: str, props: dict, required: list[str]) -> dict:
        return {"type": "function", "function": {
            "name": fname, "description": desc,
            "parameters": {"type": "object", "properties": props, "required": required}}}

    return [
        fn("check_availability", "Free start times for a service on a day (near `time` if given).",
           {"service": service, "day": day, "time": {**time, "type": ["string", "null"]}},
           ["service", "day"]),
        fn("book_appointment", "Book a service on a day at a time for a caller.",
           {"service": service, "day": day, "time": time, "name": name},
           ["service", "day", "time", "name"]),
        fn("cancel_appointment", "Cancel the caller's appointment on a day.",
           {"name": name, "day": day}, ["name", "day"]),
    ]


def _schema(name: str, schemas: list[dict]) -> dict:
    for tool in schemas:
        if tool["function"]["name"] == name:
            return tool["function"]["parameters"]
    raise ValueError(f"unknown tool {name!r}; known: {[t['function']['name'] for t in schemas]}")


def tool_call_json(name: str, args: dict, schemas: list[dict]) -> str:
    """The call's JSON object text, arguments in `properties` order, missing ones as null."""
    props = _schema(name, schemas)["properties"]
    unknown = set(args) - set(props)
    if unknown:
        raise ValueError(f"{name}: unknown argument(s) {sorted(unknown)}")
    ordered = {key: args.get(key) for key in props}
    return json.dumps({"name": name, "arguments": ordered}, ensure_ascii=False)


def tool_call_text(name: str, args: dict, schemas: list[dict]) -> str:
    return f"{TOOL_CALL_OPEN}\n{tool_call_json(name, args, schemas)}\n{TOOL_CALL_CLOSE}"


def parse_tool_call(text: str) -> tuple[str, dict] | None:
    """(name, arguments) of the first well-formed call in `text`, else None."""
    match = _CALL_RE.search(text)
    if not match:
        return None
    try:
        obj = json.loads(match.group(1))
    except ValueError:
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not isinstance(
            obj.get("arguments"), dict):
        return None
    return obj["name"], obj["arguments"]


def validate_args(name: str, args: dict, schemas: list[dict]) -> bool:
    """Every property present, enums and time format respected, required ones non-null."""
    params = _schema(name, schemas)
    props = params["properties"]
    if set(args) != set(props):
        return False
    for key, spec in props.items():
        value = args[key]
        if value is None:
            if key in params["required"]:
                return False
            continue
        if not isinstance(value, str) or not value.strip():
            return False
        if "enum" in spec and value not in spec["enum"]:
            return False
        if "pattern" in spec and not re.match(spec["pattern"], value):
            return False
        if len(value) > spec.get("maxLength", 10_000):
            return False
    return True


def result_text(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False)


def spoken_time(hhmm: str) -> str:
    """'14:30' -> '2:30 pm', '10:00' -> '10 am', '12:00' -> '12 pm'."""
    match = _TIME_RE.match(hhmm)
    if not match:
        raise ValueError(f"time must be HH:MM, got {hhmm!r}")
    hour, minute = int(match.group(1)), int(match.group(2))
    suffix = "am" if hour < 12 else "pm"
    hour12 = hour % 12 or 12
    return f"{hour12} {suffix}" if minute == 0 else f"{hour12}:{minute:02d} {suffix}"


def _to_minutes(text: str) -> int:
    """'8 am' / '10:30 pm' -> minutes after midnight."""
    match = re.match(r"^(\d{1,2})(?::(\d\d))? ?(am|pm)$", text.strip())
    if not match:
        raise ValueError(f"not a time like '8 am': {text!r}")
    hour = int(match.group(1)) % 12 + (12 if match.group(3) == "pm" else 0)
    return hour * 60 + int(match.group(2) or 0)


def slot_times(hours: str, step_min: int = 30) -> list[str]:
    """Start times on a day's grid: '8 am to 11 am' -> ['08:00', ..., '10:30']; 'closed' -> []."""
    if hours == "closed":
        return []
    start, end = (_to_minutes(part) for part in hours.split(" to "))
    return [f"{m // 60:02d}:{m % 60:02d}" for m in range(start, end, step_min)]
