"""Issue 39's attacks on the OpenAI-compatible API (findings 1, 2, 3, 6 and 7's HTTP half), each
sent beside innocent requests whose answers must not notice.

Contract:
- Pure request builders (no I/O): `chat_body(model, content, extra)` is one request's raw JSON
  text (raw, so `1e400` stays a number the client wrote); `property_tools(schema_json)` /
  `property_format(schema_json)` put one property schema in a forced tool or a response_format;
  `HUGE_MAX_LENGTH`, `REDOS_PATTERN`, `many_tools(n)` (trivial tools: 5,000 are ~530 KB, under
  the body cap) and `CLIENT_MISTAKES` (13 bodies' extras, each with the field its 400 must name).
- `await post(ctx, path, body, headers) -> Reply(status, ms, text)`: one request over a raw
  loopback socket (`Connection: close`), read to its end; status -1 when none came.
- `await innocent_round(ctx, n, concurrency)`: n distinct greedy requests; their statuses,
  answers (by index) and latencies.
- `await batch_fault(...)`, `await many_tools_attack(...)`, `await redos_attack(...)`,
  `await client_mistakes(...)`, `await cross_site_http(...)`: one finding each; every one
  returns {"ok": the attack got its documented outcome, "detail": str, "statuses": [...], ...}.
Knows nothing about the other surfaces or the harness's checks.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from diffvoice.latency_bench.reliability.common import next_ip

FAST_MS = 2000.0  # a refused schema is answered within this, however hostile (goal of 2 and 3)
HUGE_MAX_LENGTH = '{"type": "string", "maxLength": 1e30}'
REDOS_PATTERN = r"(\d?\d?\d?\d?\d?:?){8}y"
INNOCENT_MAX_TOKENS = 8

# the 13 client mistakes of finding 6: (name, extra JSON of the request, field the 400 names)
_MISTAKE_SCHEMAS = [
    ("properties [1]", '{"type": "object", "properties": [1]}', "properties"),
    ('properties "abc"', '{"type": "object", "properties": "abc"}', "properties"),
    ('minimum "a"', '{"type": "integer", "minimum": "a"}', "minimum"),
    ("maxLength [1]", '{"type": "string", "maxLength": [1]}', "maxLength"),
    ("maxLength 1e400", '{"type": "string", "maxLength": 1e400}', "maxLength"),
    ("minLength [1]", '{"type": "string", "minLength": [1]}', "minLength"),
    ("enum 5", '{"enum": 5}', "enum"),
]


def property_tools(schema_json: str, choice: str = '"required"') -> str:
    """`, "tool_choice": ..., "tools": [f(x: schema)]` (raw JSON to append to a request)."""
    params = '{"type": "object", "properties": {"x": ' + schema_json + '}, "required": ["x"]}'
    return (', "tool_choice": ' + choice + ', "tools": [{"type": "function", "function": '
            '{"name": "f", "parameters": ' + params + "}}]")


def property_format(schema_json: str) -> str:
    params = '{"type": "object", "properties": {"x": ' + schema_json + "}}"
    return (', "response_format": {"type": "json_schema", "json_schema": {"name": "r", '
            '"schema": ' + params + "}}")


CLIENT_MISTAKES: list[tuple[str, str, str]] = [
    *((f"tools: {name}", property_tools(schema), field)
      for name, schema, field in _MISTAKE_SCHEMAS),
    *((f"response_format: {name}", property_format(schema), field)
      for name, schema, field in _MISTAKE_SCHEMAS),
    ("chat_template_kwargs namespace", ', "chat_template_kwargs": {"namespace": 1}',
     "namespace"),
]


def many_tools(n: int) -> str:
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {
        "type": "object", "properties": {}}}} for i in range(n)]
    return ', "tools": ' + json.dumps(tools)


def chat_body(model: str, content: str, extra: str = "",
              max_tokens: int = INNOCENT_MAX_TOKENS) -> bytes:
    return ('{"model": ' + json.dumps(model) + f', "max_tokens": {max_tokens}, "temperature": 0, '
            '"messages": [{"role": "user", "content": ' + json.dumps(content) + "}]"
            + extra + "}").encode()


def innocent_content(i: int) -> str:
    return ("When are you open on Saturday?", "How much does a cleaning cost?",
            "Do you take new patients?", "Where exactly is the office located?")[i % 4] + \
        f" (question {i})"


@dataclass
class Reply:
    status: int
    ms: float
    text: str


def _port(ctx) -> int:
    return int(ctx.http.rsplit(":", 1)[1])


async def post(ctx, path: str, body: bytes, headers: dict[str, str] | None = None,
               timeout_s: float = 120.0, ip: str = "127.0.0.1") -> Reply:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}",
            "Connection: close",
            *(f"{k}: {v}" for k, v in {"Content-Type": "application/json",
                                        **(headers or {})}.items() if v is not None)]
    t0 = time.perf_counter()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", _port(ctx),
                                                       local_addr=(ip, 0))
    except OSError as e:
        return Reply(-1, 0.0, f"connect failed: {e!r}")
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        await writer.drain()
        raw = await asyncio.wait_for(reader.read(), timeout_s)  # to EOF (Connection: close)
    except (TimeoutError, ConnectionError) as e:
        return Reply(-1, (time.perf_counter() - t0) * 1000, f"{type(e).__name__}")
    finally:
        writer.close()
    ms = (time.perf_counter() - t0) * 1000
    status_line, _, rest = raw.partition(b"\r\n")
    parts = status_line.split()
    status = int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else -1
    return Reply(status, ms, rest.partition(b"\r\n\r\n")[2].decode("utf-8", "replace"))


def answer_of(reply: Reply) -> str | None:
    """The assistant message of a 200 (content, or its tool calls as JSON)."""
    try:
        message = json.loads(reply.text)["choices"][0]["message"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return message.get("content") or json.dumps(message.get("tool_calls"))


def error_of(reply: Reply) -> str:
    try:
        return str(json.loads(reply.text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return reply.text[:200]


def _p(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q / 100 * len(ordered)))], 1)


async def innocent_round(ctx, n: int, concurrency: int) -> dict[str, Any]:
    model = ctx.settings["model_name"]
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> Reply:
        async with sem:
            return await post(ctx, "/v1/chat/completions", chat_body(model, innocent_content(i)))

    replies = await asyncio.gather(*(one(i) for i in range(n)))
    ms = [r.ms for r in replies if r.status == 200]
    return {"statuses": [r.status for r in replies], "answers": [answer_of(r) for r in replies],
            "failed": sum(r.status != 200 for r in replies), "p50_ms": _p(ms, 50),
            "p99_ms": _p(ms, 99)}


async def _beside_innocents(ctx, hostile: bytes, repeats: int, n: int, concurrency: int,
                            quiet: dict | None) -> tuple[list[Reply], dict[str, Any]]:
    """`repeats` hostile requests one after another while `n` innocent ones run."""
    async def hostile_loop() -> list[Reply]:
        out, ip = [], next_ip()  # the attacker is another client than the innocents
        for _ in range(repeats):
            out.append(await post(ctx, "/v1/chat/completions", hostile, ip=ip))
        return out

    hostile_replies, innocents = await asyncio.gather(hostile_loop(),
                                                      innocent_round(ctx, n, concurrency))
    changed = 0
    if quiet is not None:  # greedy decoding: a row's tokens must not depend on its batch
        changed = sum(a is not None and b is not None and a != b
                      for a, b in zip(innocents["answers"], quiet["answers"], strict=False))
    innocents["changed_vs_quiet"] = changed
    return hostile_replies, innocents


def _innocent_detail(inn: dict) -> str:
    return (f"innocent: {inn['statuses'].count(200)}/{len(inn['statuses'])} 200, "
            f"{inn['changed_vs_quiet']} answers changed vs quiet, p50 {inn['p50_ms']} / p99 "
            f"{inn['p99_ms']} ms")


def _faults(replies: list[Reply], innocents: dict) -> int:
    return sum(r.status >= 500 for r in replies) + sum(s >= 500 for s in innocents["statuses"])


async def batch_fault(ctx, scale: dict, quiet: dict | None) -> dict[str, Any]:
    """1: maxLength 1e30 with tool_choice required, repeated, beside innocent requests."""
    body = chat_body(ctx.settings["model_name"], "What is the name on the booking?",
                     property_tools(HUGE_MAX_LENGTH))
    replies, inn = await _beside_innocents(ctx, body, scale["atk_hostile"],
                                           scale["atk_innocent"], scale["atk_concurrency"], quiet)
    statuses = [r.status for r in replies]
    ok = inn["failed"] == 0 and inn["changed_vs_quiet"] == 0 and all(
        s in (200, 400) for s in statuses)
    return {"ok": ok, "detail": f"hostile x{len(statuses)}: {sorted(set(statuses))}; "
            + _innocent_detail(inn), "innocent": inn, "server_faults": _faults(replies, inn)}


async def _refused_fast(ctx, scale: dict, quiet: dict | None, extra: str, must_say: tuple[str, ...],
                        content: str) -> dict[str, Any]:
    body = chat_body(ctx.settings["model_name"], content, extra)
    replies, inn = await _beside_innocents(ctx, body, scale["atk_hostile"],
                                           scale["atk_innocent"], scale["atk_concurrency"], quiet)
    slowest = max(r.ms for r in replies)
    refused = all(r.status == 400 and all(w in error_of(r) for w in must_say) for r in replies)
    ok = refused and slowest <= FAST_MS and inn["failed"] == 0 and inn["changed_vs_quiet"] == 0
    return {"ok": ok, "body_bytes": len(body), "refused_ms_max": round(slowest, 1),
            "detail": f"{len(body) // 1000} KB x{len(replies)}: "
                      f"{sorted({r.status for r in replies})} {error_of(replies[0])[:90]!r}, "
                      f"slowest {slowest:.0f} ms (goal <= {FAST_MS:.0f}); " + _innocent_detail(inn),
            "innocent": inn, "server_faults": _faults(replies, inn)}


async def many_tools_attack(ctx, scale: dict, quiet: dict | None) -> dict[str, Any]:
    """2: 5,000 trivial tools: a 400 naming the tool limit, at once."""
    return await _refused_fast(ctx, scale, quiet, many_tools(5000), ("tools", "at most"),
                               "Book me in please.")


async def redos_attack(ctx, scale: dict, quiet: dict | None) -> dict[str, Any]:
    """3: a catastrophic-backtracking pattern in a forced tool: a 400, at once."""
    schema = json.dumps({"type": "string", "pattern": REDOS_PATTERN})
    return await _refused_fast(ctx, scale, quiet, property_tools(schema), ("pattern",),
                               "What time suits you?")


async def client_mistakes(ctx) -> dict[str, Any]:
    """6: each of the 13 malformed values: 400 naming its field, never 5xx."""
    model = ctx.settings["model_name"]
    ip, lanes = next_ip(), asyncio.Semaphore(4)  # one client, within its concurrency

    async def one(extra: str) -> Reply:
        async with lanes:
            return await post(ctx, "/v1/chat/completions", chat_body(model, "hello", extra),
                              ip=ip)

    replies = await asyncio.gather(*(one(extra) for _, extra, _ in CLIENT_MISTAKES))
    wrong = [f"{name}: {r.status} {error_of(r)[:60]!r}" for (name, _, field), r in
             zip(CLIENT_MISTAKES, replies, strict=True)
             if r.status != 400 or field not in error_of(r)]
    statuses = [r.status for r in replies]
    return {"ok": not wrong, "server_faults": sum(s >= 500 for s in statuses),
            "detail": f"{statuses.count(400)} of {len(replies)} answered 400 naming the field"
                      + (f"; wrong: {'; '.join(wrong[:5])}" if wrong else "")}


async def cross_site_http(ctx) -> dict[str, Any]:
    """7 (HTTP): a text/plain POST -> 415; a JSON POST from a foreign Origin -> 403."""
    body = chat_body(ctx.settings["model_name"], "hello")
    plain = await post(ctx, "/v1/chat/completions", body, {"Content-Type": "text/plain"})
    foreign = await post(ctx, "/v1/chat/completions", body, {"Origin": "https://evil.example"})
    return {"ok": plain.status == 415 and foreign.status == 403,
            "server_faults": (plain.status >= 500) + (foreign.status >= 500),
            "detail": f"text/plain -> {plain.status}, Origin https://evil.example -> "
                      f"{foreign.status}"}
