"""Random and hostile tool schemas / response_formats, as an attacker or a careless client sends.

    tools, tool_choice, response_format = hostile_request(rng)
One generator, seeded by the caller: the reliability fuzz draws thousands of requests from it
(latency_bench/reliability/fuzz.py), and the property-based test (tests/engine/
test_request_isolation.py) drives it with hypothesis' random streams. It mixes well-formed
schemas the engine supports with every kind of bad value the issue tracker has seen (keywords
of the wrong JSON type, numbers beyond int64 or float range, catastrophic-backtracking
patterns, deep nesting, huge enums, many tools, unsupported keywords) so that a server under
test must answer each with 200 or 400, never 5xx, and never disturb a concurrent request.
Pure: no I/O.
"""

from __future__ import annotations

import random
from typing import Any

TIME = r"^([01]\d|2[0-3]):([0-5]\d)$"
REDOS = [r"(\d?\d?\d?\d?\d?:?){9}y", r"^(a+)+$", r"(x+x+)+y", r"^(\d|\d\d)+:$",
         r"((ab)*|a)*c", r"(?=a)b", r"(a)\1", "[", "(?P<n>", r"\d{1000000}"]
BAD_NUMBERS = [1e30, 1e400, -1e400, 2 ** 63, 2 ** 64 + 1, -(2 ** 70), float("nan"), 1.5, -1]
BAD_VALUES = [[1], "abc", {"a": 1}, None, True, "", [], 5]
TYPES = ["string", "integer", "number", "boolean", "object", "null", "array", "frob",
         ["string", "null"], ["integer", "string"], [], 7]


def _junk(rng: random.Random) -> Any:
    return rng.choice(BAD_VALUES + BAD_NUMBERS)


def _enum(rng: random.Random) -> Any:
    roll = rng.random()
    if roll < 0.5:
        return [rng.choice(["a", "b", "monday", "x" * rng.randint(1, 40), 1, None, True])
                for _ in range(rng.randint(1, 6))]
    if roll < 0.7:
        return [f"v{i}" for i in range(rng.choice([100, 2000, 2001, 5000]))]
    if roll < 0.8:
        return ["y" * rng.choice([300, 5000])]
    return _junk(rng)


def hostile_schema(rng: random.Random, depth: int = 0) -> Any:
    """One schema value: mostly dicts with a type, sometimes anything at all."""
    if rng.random() < 0.05:
        return _junk(rng)
    if depth > 3 and rng.random() < 0.3:  # deep nesting
        node: Any = {"type": "string"}
        for _ in range(rng.choice([5, 12, 40])):
            node = {"type": "object", "properties": {"a": node}}
        return node
    kind = rng.choice(TYPES)
    schema: dict[str, Any] = {"type": kind}
    if kind == "object" or rng.random() < 0.1:
        n = rng.choice([0, 1, 2, 3, 5, 70]) if depth == 0 else rng.choice([0, 1, 2])
        if n > 5:  # many properties: plain ones (the count is the attack, not the size)
            props = {f"p{i}": {"type": "string"} for i in range(n)}
        else:
            props = {f"p{i}": hostile_schema(rng, depth + 1) for i in range(n)}
        schema["properties"] = props if rng.random() > 0.05 else rng.choice([[1], "abc", 3])
    extras = {
        "maxLength": lambda: rng.choice([rng.randint(0, 80), *BAD_NUMBERS, *BAD_VALUES]),
        "minLength": lambda: rng.choice([rng.randint(0, 80), *BAD_NUMBERS, *BAD_VALUES]),
        "minimum": lambda: rng.choice([rng.randint(-50, 50), *BAD_NUMBERS, *BAD_VALUES]),
        "maximum": lambda: rng.choice([rng.randint(-50, 5000), *BAD_NUMBERS, *BAD_VALUES]),
        "pattern": lambda: rng.choice([TIME, *REDOS, 3, None]),
        "enum": lambda: _enum(rng),
        "const": lambda: rng.choice(["x", 1, None, [1, 2], {"a": 1}]),
        "oneOf": lambda: [{"type": "string"}],
        "items": lambda: hostile_schema(rng, depth + 1),
        "required": lambda: rng.choice([["p0"], "p0", [1]]),
        "description": lambda: rng.choice(["d", 5, "x" * 500]),
    }
    for key in rng.sample(list(extras), rng.randint(0, 3)):
        schema[key] = extras[key]()
    return schema


def hostile_request(rng: random.Random) -> tuple[list, Any, Any]:
    """(tools, tool_choice, response_format) of one request."""
    if rng.random() < 0.3:
        schema = hostile_schema(rng)
        if isinstance(schema, dict) and rng.random() < 0.7:
            schema["type"] = "object"
        return [], None, {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
    n = rng.choice([1, 1, 1, 2, 3, 65, 300]) if rng.random() < 0.95 else 5000
    tools = []
    for i in range(n):
        # many tools: trivial ones (5,000 of them is 740 KB, under the body cap)
        params = hostile_schema(rng) if n <= 3 else {"type": "object", "properties": {}}
        if isinstance(params, dict) and rng.random() < 0.8:
            params["type"] = "object"
        name = f"t{i}" if rng.random() > 0.03 else rng.choice(["", "a b", "x" * 100, 5])
        tools.append({"type": "function", "function": {"name": name, "parameters": params}})
    choice = rng.choice(["auto", "required", "none", None,
                         {"type": "function", "function": {"name": "t0"}}, "bogus", 5])
    return tools, choice, None
