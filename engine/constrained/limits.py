"""What a request may bring to constrained decoding, checked before anything is compiled.

    check_request(tools, tool_choice, response_format)   # ValueError naming the field
    budget = Budget(seconds, cancelled)                  # compile_* call budget.check(where)
                                                         # and budget.spend(n, where)
Everything a request's tools / response_format carry is bounded here, before it reaches the
layout compiler (layout.py), the plan cache or a batched pass: how many tools, how large and how
deep their schemas, how many enum values, how long names and patterns are, and that every
keyword the compiler reads holds a value of the right type and range (the JSON Schema
meta-schema, Draft 2020-12, via the jsonschema library, then the engine's own numeric bounds).
A string's `maxLength` may be any non-negative integer; the compiler clamps it to what a slot
can hold (layout.MAX_STRING_CHARS), so no value reaches a tensor that cannot be represented.

`Budget` bounds the compile itself, first by its work and then by time. The work is counted,
not timed: every candidate the compiler tokenizes (an enum value, an integer of a bounded range,
a time of day) is one tokenization, and a request whose schemas need more than
MAX_TOKENIZATIONS is refused with a ValueError before any of them is done, on every machine
alike. Time is the backstop: the compiler calls `check` at each value and every few
tokenizations, and it raises once the preparation has run longer than its seconds or its request
was cancelled (the caller went away). Knows nothing about models, tokenizers or the engine's
threads.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time

import jsonschema

MAX_TOOLS = 64                # OpenAI allows 128; each tool adds a layout to every request's plan
MAX_SCHEMA_CHARS = 65536      # all tools + response_format, as compact JSON
MAX_SCHEMA_NODES = 512        # schema objects over all tools (each value, property, item)
MAX_SCHEMA_DEPTH = 8          # nesting of objects inside objects
# JSON objects anywhere in the request's schemas ($defs, unknown keywords and all): what the
# meta-schema check costs (~0.3 ms each on this 2-core CPU); counted before it runs
MAX_SCHEMA_OBJECTS = 1024
MAX_PROPERTIES = 64           # properties of one object
MAX_ENUM_VALUES = 2000        # candidates of one enum (= layout.MAX_CHOICES)
MAX_REQUEST_ENUM_VALUES = 4000  # enum candidates over the whole request
MAX_ENUM_VALUE_CHARS = 256    # one candidate's JSON text
MAX_NAME_CHARS = 64           # a tool's or a property's name
MAX_PATTERN_CHARS = 256
MAX_NUMBER = 2 ** 53          # |minimum|, |maximum|: exact in a float and in a token slot
MAX_TOKENIZATIONS = 8192      # candidates one request's compile tokenizes (~0.3 s, this 2-core CPU)
TOOL_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# the engine's own schema keywords (engine/constrained/context.py), checked like any other
CONTEXT_KEY = "x-diffvoice-context"
CONTEXT_MODES = ("span", "name_span", "mentioned")
ALIASES_KEY = "x-diffvoice-aliases"   # {enum value: [phrases]}; phrases count as enum values

_META = jsonschema.Draft202012Validator.META_SCHEMA
_CHECKER = jsonschema.Draft202012Validator(_META,
                                           format_checker=jsonschema.Draft202012Validator
                                           .FORMAT_CHECKER)


class PreparationAborted(ValueError):
    """A request's preparation ran past its budget, or its caller went away."""


class Budget:
    """The work one request's preparation may take, and its cancellation.

    `seconds` is CPU time of the preparing thread (time.thread_time): the work this request
    causes, not the time it waits for the interpreter lock or a core while others run, so a
    legitimate request is not refused because the machine is busy. A wall-clock cap of
    WALL_FACTOR x `seconds` stops a preparation that is starved or waits for too long."""

    WALL_FACTOR = 10

    def __init__(self, seconds: float, cancelled: threading.Event | None = None,
                 tokenizations: int = MAX_TOKENIZATIONS):
        self.seconds = seconds
        self.cancelled = cancelled
        self.tokenizations = tokenizations
        self.start()

    def start(self) -> None:
        """(Re)start the clocks and the work count, on the thread that does the work: when the
        preparation begins to run, not when it was queued."""
        self.cpu_deadline = time.thread_time() + self.seconds
        self.wall_deadline = time.perf_counter() + self.seconds * self.WALL_FACTOR
        self.spent = 0

    def spend(self, tokenizations: int, where: str = "") -> None:
        """Count `tokenizations` the compile will do (the compiler counts each slot's candidates
        as it walks the schema, before it tokenizes any); a ValueError (the request's own shape,
        the same on every machine) once the request would pass its bound."""
        self.spent += tokenizations
        if self.spent > self.tokenizations:
            raise ValueError(
                f"{where + ': ' if where else ''}compiling this request's schemas needs more than "
                f"{self.tokenizations} candidate tokenizations (each enum value, integer of a "
                "bounded range and time of day is one): use fewer or smaller enums and ranges")

    def check(self, where: str = "") -> None:
        if self.cancelled is not None and self.cancelled.is_set():
            raise PreparationAborted("the request was cancelled while it was prepared")
        if time.thread_time() > self.cpu_deadline or time.perf_counter() > self.wall_deadline:
            raise PreparationAborted(
                f"compiling this request's schema{' (' + where + ')' if where else ''} took "
                f"longer than the {self.seconds:g} s preparation budget: simplify the tools or "
                "response_format (fewer tools, enum values or properties)")


def _schema_text(value, field: str) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=True, default=repr)
    except (RecursionError, ValueError) as exc:
        raise ValueError(f"{field}: not a JSON value ({exc})") from exc


def _meta_check(schema, field: str, budget: Budget | None = None) -> None:
    """The JSON Schema meta-schema: every keyword's value of the right JSON type. `$defs` /
    `definitions` entries are checked one by one (the meta-schema checks each the same way),
    with the budget looked at between them."""
    defs = {}
    if isinstance(schema, dict):
        for key in ("$defs", "definitions"):
            if isinstance(schema.get(key), dict) and len(schema[key]) > 1:
                defs[key] = schema[key]
        if defs:
            for key, entries in defs.items():
                for name, sub in entries.items():
                    if budget is not None:
                        budget.check(f"{field}.{key}")
                    _meta_check({key: {name: sub}}, field)
            schema = {k: v for k, v in schema.items() if k not in defs}
    if budget is not None:
        budget.check(field)
    try:
        error = jsonschema.exceptions.best_match(_CHECKER.iter_errors(schema))
    except RecursionError as exc:
        raise ValueError(f"{field}: schema nested too deeply") from exc
    if error is not None:
        where = "".join(f"[{p!r}]" if isinstance(p, int) else f".{p}"
                        for p in error.absolute_path)
        raise ValueError(f"{field}{where}: {error.message[:200]}")


class _Walk:
    """Counts nodes and enum values over one request and checks the engine's own bounds."""

    def __init__(self):
        self.nodes = 0
        self.enum_values = 0

    def _own_keywords(self, schema: dict, path: str) -> None:
        """The engine's `x-diffvoice-*` keywords hold what context.py reads (JSON Schema's
        meta-schema lets any `x-` value through)."""
        mode = schema.get(CONTEXT_KEY)
        if mode is not None and mode not in CONTEXT_MODES:
            raise ValueError(f"{path}.{CONTEXT_KEY}: must be one of {', '.join(CONTEXT_MODES)}")
        aliases = schema.get(ALIASES_KEY)
        if aliases is None:
            return
        if not isinstance(aliases, dict):
            raise _alias_error(path)
        for value, phrases in aliases.items():
            if len(value) > MAX_ENUM_VALUE_CHARS or not isinstance(phrases, list) or any(
                    not isinstance(a, str) or len(a) > MAX_ENUM_VALUE_CHARS for a in phrases):
                raise _alias_error(path)
            self.enum_values += len(phrases)
        if self.enum_values > MAX_REQUEST_ENUM_VALUES:
            raise ValueError(f"{path}.{ALIASES_KEY}: the request has more than "
                             f"{MAX_REQUEST_ENUM_VALUES} enum values and alias phrases in all")

    def value(self, schema, path: str, depth: int) -> None:
        self.nodes += 1
        if self.nodes > MAX_SCHEMA_NODES:
            raise ValueError(f"{path}: the request's schemas have more than {MAX_SCHEMA_NODES} "
                             "nodes")
        if depth > MAX_SCHEMA_DEPTH:
            raise ValueError(f"{path}: schemas may nest at most {MAX_SCHEMA_DEPTH} levels")
        if not isinstance(schema, dict):
            raise ValueError(f"{path}: a schema must be an object")
        for key in ("minimum", "maximum"):
            v = schema.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                                  or not math.isfinite(v) or abs(v) > MAX_NUMBER):
                raise ValueError(f"{path}.{key}: must be a finite number within ±2^53")
        for key in ("minLength", "maxLength"):
            v = schema.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)
                                  or not math.isfinite(v) or v < 0 or v != int(v)):
                raise ValueError(f"{path}.{key}: must be a non-negative integer")
        pattern = schema.get("pattern")
        if pattern is not None and (not isinstance(pattern, str)
                                    or len(pattern) > MAX_PATTERN_CHARS):
            raise ValueError(f"{path}.pattern: must be a string of at most {MAX_PATTERN_CHARS} "
                             "characters")
        values = schema.get("enum")
        if values is not None:
            if not isinstance(values, list) or len(values) > MAX_ENUM_VALUES:
                raise ValueError(f"{path}.enum: must be a list of at most {MAX_ENUM_VALUES} "
                                 "values")
            self.enum_values += len(values)
            if self.enum_values > MAX_REQUEST_ENUM_VALUES:
                raise ValueError(f"{path}.enum: the request has more than "
                                 f"{MAX_REQUEST_ENUM_VALUES} enum values in all")
            if any(len(_schema_text(v, path)) > MAX_ENUM_VALUE_CHARS for v in values):
                raise ValueError(f"{path}.enum: a value longer than {MAX_ENUM_VALUE_CHARS} "
                                 "characters")
        self._own_keywords(schema, path)
        props = schema.get("properties")
        if props is not None:
            if not isinstance(props, dict) or len(props) > MAX_PROPERTIES:
                raise ValueError(f"{path}.properties: must be an object of at most "
                                 f"{MAX_PROPERTIES} properties")
            for name, sub in props.items():
                if not isinstance(name, str) or len(name) > MAX_NAME_CHARS:
                    raise ValueError(f"{path}.properties: names must be strings of at most "
                                     f"{MAX_NAME_CHARS} characters")
                self.value(sub, f"{path}.{name}", depth + 1)
        for key in ("items", "additionalProperties", "not", "if", "then", "else"):
            if isinstance(schema.get(key), dict):
                self.value(schema[key], f"{path}.{key}", depth + 1)
        for key in ("oneOf", "anyOf", "allOf", "prefixItems"):
            if isinstance(schema.get(key), list):
                for i, sub in enumerate(schema[key]):
                    self.value(sub, f"{path}.{key}[{i}]", depth + 1)


def _alias_error(path: str) -> ValueError:
    return ValueError(f"{path}.{ALIASES_KEY}: must be an object mapping enum values to lists of "
                      f"phrases (strings of at most {MAX_ENUM_VALUE_CHARS} characters)")


def _objects(value) -> int:
    """JSON objects in `value`, at any depth."""
    count, stack = 0, [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            count += 1
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return count


def check_request(tools, tool_choice, response_format, budget: Budget | None = None) -> None:
    """Raise ValueError naming the field when a request's tools / tool_choice / response_format
    are malformed or beyond the limits above; cheap, linear in the request's size."""
    if tools is None:
        tools = ()
    if not isinstance(tools, list | tuple):
        raise ValueError("tools must be a list of tool objects")
    if len(tools) > MAX_TOOLS:
        raise ValueError(f"tools: at most {MAX_TOOLS} tools per request, got {len(tools)}")
    text = _schema_text([list(tools), tool_choice, response_format], "tools")
    if len(text) > MAX_SCHEMA_CHARS:
        raise ValueError(f"tools and response_format: {len(text)} characters of schema, at "
                         f"most {MAX_SCHEMA_CHARS}")
    if text in _passed:  # the same tools as an earlier request (a voice call's every turn)
        return
    objects = text.count("{")  # every JSON object opens with one (strings may add a few more:
    if objects > MAX_SCHEMA_OBJECTS:  # an over-count only)
        objects = _objects([list(tools), response_format])
        if objects > MAX_SCHEMA_OBJECTS:
            raise ValueError(f"tools and response_format: {objects} JSON objects in the "
                             f"schemas ($defs and every keyword included), at most "
                             f"{MAX_SCHEMA_OBJECTS}")
    _check(tools, response_format, budget)
    if len(_passed) >= _PASSED_MAX:
        _passed.pop(next(iter(_passed)))
    _passed[text] = True


_PASSED_MAX = 256
_passed: dict[str, bool] = {}  # request schemas (compact JSON) that passed, oldest first


def _check(tools, response_format, budget: Budget | None = None) -> None:
    walk = _Walk()
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise ValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": "
                             "{...}}")
        fn = tool.get("function")
        name = fn.get("name") if isinstance(fn, dict) else None
        if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
            raise ValueError(f"tools[{i}].function.name must be 1-{MAX_NAME_CHARS} letters, "
                             "digits, '_', '-' or '.'")
        desc = fn.get("description")
        if desc is not None and not isinstance(desc, str):
            raise ValueError(f"tools[{i}].function.description must be a string")
        params = fn.get("parameters")
        if params is not None:
            field = f"tools[{i}].function.parameters"
            walk.value(params, field, 0)
            _meta_check(params, field, budget)
    if isinstance(response_format, dict) and response_format.get("type") == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if schema is not None:
            field = "response_format.json_schema.schema"
            walk.value(schema, field, 0)
            _meta_check(schema, field, budget)
