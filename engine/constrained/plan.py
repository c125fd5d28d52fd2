"""From a request's tools / tool_choice / response_format to a compiled plan and its start mode.

    plan = build_plan(params, tokenizer, eos_id)   # None when nothing is constrained
    state = plan.start()                           # a fresh ConstrainedState per request
tool_choice (OpenAI's values): "none" -> text (call opening banned); "auto" (default when tools
are given) -> decide; "required" -> name (or call when one tool); {"type": "function",
"function": {"name": N}} -> call of N. response_format {"type": "json_schema", "json_schema":
{"schema": S}} -> json; {"type": "json_object"} -> json with one free-form JSON object as the
whole answer (engine/constrained/json_free.py); {"type": "text"} -> None.
`messages` (the request's chat messages) narrow the properties that opt in with
"x-diffvoice-context" (engine/constrained/context.py) before compiling.
Plans are cached per tokenizer and request shape (the compiled layouts are pure data), and so
are refusals: a request shape that failed to compile fails again at the cost of a lookup.
Raises ValueError naming the offending field on malformed, oversized (limits.check_request) or
unsupported input, or when the compile runs past its `budget` (limits.Budget).
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass

from diffvoice.engine.constrained.context import contextualize
from diffvoice.engine.constrained.json_free import JsonObjectSlot
from diffvoice.engine.constrained.layout import Layout, compile_calls, compile_value
from diffvoice.engine.constrained.limits import Budget, PreparationAborted, check_request
from diffvoice.engine.constrained.slots import Vocab
from diffvoice.engine.constrained.state import ConstrainedState

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
_CACHE_MAX = 64


@dataclass
class Plan:
    vocab: Vocab
    mode: str                       # start mode of each request
    names: list[str]                # tool names, in request order
    layouts: dict[str, Layout]      # per tool
    forced_tool: str | None
    json_layout: Layout | None
    open_id: int                    # first token of the call opening
    name_end: int                   # relative end of the shared header + name slot

    def start(self) -> ConstrainedState:
        tool = self.forced_tool or (self.names[0] if len(self.names) == 1 else None)
        mode = "call" if self.mode == "name" else self.mode  # "name": the name slot first
        return ConstrainedState(self, mode, tool)

    @property
    def max_length(self) -> int:
        """Longest structured answer (tokens incl. EOS) this plan can produce."""
        lengths = [lay.length for lay in self.layouts.values()]
        if self.json_layout is not None:
            lengths.append(self.json_layout.length)
        return max(lengths, default=0)


_vocab_lock = threading.Lock()


def _vocab(tokenizer) -> Vocab:
    """The tokenizer's vocabulary tables, built once per tokenizer (not a request's work)."""
    vocab = getattr(tokenizer, "_diffvoice_vocab", None)
    if vocab is None:
        with _vocab_lock:
            vocab = getattr(tokenizer, "_diffvoice_vocab", None)
            if vocab is None:
                vocab = tokenizer._diffvoice_vocab = Vocab(tokenizer)
    return vocab


def json_object_layout(vocab: Vocab, eos_id: int, width: int) -> Layout:
    """json_object: the whole answer (max_new_tokens - 1 tokens) is one free-form JSON object."""
    if width < 3:
        raise ValueError("response_format json_object needs max_new_tokens >= 3")
    return Layout({width - 1: eos_id}, [(0, JsonObjectSlot(vocab, width - 1))], width,
                  ("slot", 0))


def tool_function(tool, i: int) -> tuple[str, dict]:
    """(name, parameters schema) of one OpenAI-style tool; ValueError naming tools[i]."""
    if not isinstance(tool, dict) or tool.get("type", "function") != "function":
        raise ValueError(f"tools[{i}] must be {{\"type\": \"function\", \"function\": {{...}}}}")
    fn = tool.get("function")
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError(f"tools[{i}].function.name must be a non-empty string")
    params = fn.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(params, dict) or params.get("type", "object") != "object":
        raise ValueError(f"tools[{i}].function.parameters must be an object schema")
    return fn["name"], {**params, "type": "object"}


def choice_mode(tool_choice, names: list[str]) -> tuple[str, str | None]:
    if tool_choice is None or tool_choice == "auto":
        return "decide", None
    if tool_choice == "none":
        return "text", None
    if tool_choice == "required":
        return "name", None
    if isinstance(tool_choice, dict) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if name not in names:
            raise ValueError(f"tool_choice names function {name!r}, which is not in tools "
                             f"({names})")
        return "call", name
    raise ValueError("tool_choice must be 'none', 'auto', 'required' or "
                     "{'type': 'function', 'function': {'name': ...}}")


def json_schema_of(response_format) -> dict | None:
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ValueError("response_format must be an object")
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return JSON_OBJECT
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
            raise ValueError("response_format.json_schema.schema must be a JSON schema object")
        return spec["schema"]
    raise ValueError(f"response_format.type must be text, json_object or json_schema, "
                     f"got {kind!r}")


JSON_OBJECT = {"type": "object", "x-diffvoice": "free-form json_object"}
_cache: dict[tuple, Plan | ValueError] = {}
_compiling: dict[tuple, threading.Lock] = {}  # one compile per request shape at a time
_compiling_lock = threading.Lock()


def build_plan(tools, tool_choice, response_format, tokenizer, eos_id: int,
               max_new_tokens: int = 64, messages=None, budget: Budget | None = None
               ) -> Plan | None:
    check_request(tools, tool_choice, response_format, budget)
    schema = json_schema_of(response_format)
    if tools and messages is not None:  # x-diffvoice-context slots (engine/constrained/context)
        forced = (tool_choice.get("function") or {}).get("name") \
            if isinstance(tool_choice, dict) else None
        narrowed = contextualize(tools, messages, keep=forced,
                                 must_call=tool_choice == "required")
        if narrowed:
            tools = narrowed
        else:  # every tool waits for a value nobody said: the model answers (asks for it)
            tool_choice = "none"
    if not tools and schema is None:
        if tool_choice not in (None, "none", "auto"):
            raise ValueError("tool_choice needs tools")
        return None
    try:
        shape = json.dumps([tools, tool_choice, schema], sort_keys=True, default=str)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ValueError(f"tools / tool_choice / response_format: not JSON ({exc})") from exc
    key = (id(tokenizer), shape, max_new_tokens if schema is JSON_OBJECT else None)
    plan = _cache.get(key)
    if plan is None:
        with _compiling_lock:
            lock = _compiling.setdefault(key, threading.Lock())
        with lock:  # concurrent requests of one new shape: the first compiles, the rest wait
            plan = _cache.get(key)
            if plan is None:
                plan = _compile_cached(key, tools, tool_choice, schema, tokenizer, eos_id,
                                       max_new_tokens, budget)
        with _compiling_lock:
            _compiling.pop(key, None)
    if isinstance(plan, ValueError):
        raise ValueError(str(plan))
    return plan


def _compile_cached(key, tools, tool_choice, schema, tokenizer, eos_id, max_new_tokens,
                    budget) -> Plan | ValueError:
    try:
        plan = _compile(tools, tool_choice, schema, tokenizer, eos_id, max_new_tokens, budget)
    except PreparationAborted:
        raise  # not the request's shape: this time's budget or cancellation
    except ValueError as exc:
        plan = exc
    if len(_cache) >= _CACHE_MAX:
        _cache.pop(next(iter(_cache)))
    _cache[key] = plan
    return plan


def _compile(tools, tool_choice, schema, tokenizer, eos_id: int, max_new_tokens: int,
             budget: Budget | None) -> Plan:
    vocab = _vocab(tokenizer)
    if budget is None:  # no time limit, but the same bound on the work as a served request
        budget = Budget(math.inf)
    budget.start()  # the tables (built once per tokenizer) are not this request's work
    open_ids = vocab.encode(TOOL_CALL_OPEN)
    if schema is not None:
        if tools and tool_choice != "none":
            raise ValueError("response_format json_schema cannot be combined with tools")
        layout = (json_object_layout(vocab, eos_id, max_new_tokens) if schema is JSON_OBJECT
                  else compile_value(schema, vocab, eos_id, budget=budget))
        plan = Plan(vocab, "json", [], {}, None, layout, open_ids[0], 0)
    else:
        functions = [tool_function(t, i) for i, t in enumerate(tools)]
        names = [n for n, _ in functions]
        if len(set(names)) != len(names):
            raise ValueError("tools: function names must be unique")
        mode, forced = choice_mode(tool_choice, names)
        layouts = compile_calls(functions, forced, vocab, eos_id, TOOL_CALL_OPEN,
                                TOOL_CALL_CLOSE, budget)
        start, name_slot = layouts[names[0]].slots[0]
        name_end = start + name_slot.width
        head = {r: t for r, t in layouts[names[0]].fixed.items() if r < name_end}
        for n, lay in layouts.items():
            if {r: t for r, t in lay.fixed.items() if r < name_end} != head \
                    or lay.slots[0][0] != start:
                raise ValueError(f"tools: the call header of {n!r} tokenizes differently")
        plan = Plan(vocab, mode, names, layouts, forced, None, open_ids[0], name_end)
    return plan
