"""Client mistakes and hostile schemas through the real router (uvicorn on loopback, random-weight
engine): every malformed schema value is a 400 naming the field, never a 500 (issue 39 item 6);
a hostile request batched beside an innocent one leaves the innocent's answer unchanged
(items 1-3); generated schemas get 200 or 4xx, never 5xx."""

from __future__ import annotations

import concurrent.futures
import json
import random
import urllib.error
import urllib.request

import pytest
from test_openai_api import TIMEOUT_S, _Config, _engine, _LoopbackServer, _State

from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.latency_bench.reliability.schemas import hostile_request


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("hostile") / "m", family="sdar",
                                  init_std=0.5)
    engine = _engine(path, max_running=8)
    server = _LoopbackServer(_State(engine, _Config()))
    yield server
    server.close()
    engine.close()


def post(server, body: str) -> tuple[int, dict]:
    request = urllib.request.Request(f"{server.base_url}/chat/completions",
                                     data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def chat(server, extra: str = "", content: str = "hello") -> str:
    return ('{"model": "m", "max_tokens": 8, "temperature": 0, "messages": [{"role": "user", '
            f'"content": {json.dumps(content)}}}]{extra}}}')


def with_param(value: str, where: str = "tools") -> str:
    """A request whose one property schema carries `value` (raw JSON text, so 1e400 stays)."""
    params = '{"type": "object", "properties": {"x": ' + value + "}}"
    if where == "tools":
        return (', "tool_choice": "required", "tools": [{"type": "function", "function": '
                '{"name": "f", "parameters": ' + params + "}}]")
    return ', "response_format": {"type": "json_schema", "json_schema": {"name": "r", ' \
           '"schema": ' + params + "}}"


CASES = [  # (raw JSON of the property schema, the field the 400 must name)
    ('{"type": "object", "properties": [1]}', "properties"),
    ('{"type": "object", "properties": "abc"}', "properties"),
    ('{"type": "integer", "minimum": "a"}', "minimum"),
    ('{"type": "string", "maxLength": [1]}', "maxLength"),
    ('{"type": "string", "maxLength": 1e400}', "maxLength"),
    ('{"type": "string", "minLength": [1]}', "minLength"),
    ('{"enum": 5}', "enum"),
]


@pytest.mark.parametrize("where", ["tools", "response_format"])
@pytest.mark.parametrize("schema,field", CASES)
def test_malformed_schema_values_are_400_naming_the_field(server, schema, field, where):
    status, body = post(server, chat(server, with_param(schema, where)))
    assert status == 400, body
    assert field in body["error"]["message"]


def test_template_kwargs_shadowing_a_template_name_is_400(server):
    status, body = post(server, chat(server, ', "chat_template_kwargs": {"namespace": 1}'))
    assert status == 400, body
    assert "namespace" in body["error"]["message"]


def test_huge_max_length_beside_innocent_requests(server):
    """maxLength 1e30 + tool_choice required made 49 of 50 innocent requests 500."""
    innocent = [chat(server, content=f"question {i}") for i in range(6)]
    alone = [post(server, body) for body in innocent]
    hostile = chat(server, with_param('{"type": "string", "maxLength": 1e30}'))
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(post, server, hostile)] + [pool.submit(post, server, b)
                                                          for b in innocent]
        results = [f.result() for f in futures]
    assert results[0][0] == 200
    for (status, body), (_, before) in zip(results[1:], alone, strict=True):
        assert status == 200
        assert body["choices"][0]["message"]["content"] == \
            before["choices"][0]["message"]["content"]


def test_five_thousand_tools_are_refused_at_once(server):
    tools = [{"type": "function", "function": {"name": f"t{i}", "parameters": {
        "type": "object", "properties": {}}}} for i in range(5000)]
    status, body = post(server, chat(server, ', "tools": ' + json.dumps(tools)))
    assert status == 400 and "at most 64 tools" in body["error"]["message"]


def test_generated_schemas_get_200_or_4xx_never_5xx(server):
    rng = random.Random(39)
    statuses = {}
    for _ in range(150):
        tools, choice, fmt = hostile_request(rng)
        request = {"model": "m", "max_tokens": 8, "messages": [{"role": "user",
                                                                "content": "hi"}]}
        if tools:
            request["tools"] = tools
            request["tool_choice"] = choice
        if fmt:
            request["response_format"] = fmt
        status, _ = post(server, json.dumps(request))
        statuses[status] = statuses.get(status, 0) + 1
    assert all(s == 200 or 400 <= s < 500 for s in statuses), statuses
    assert statuses.get(200) and statuses.get(400), statuses  # both outcomes were exercised


@pytest.mark.parametrize("pattern", [r"(\d?\d?\d?\d?\d?:?){6}y", r"^(?=00:0[0-4])(?:\d?:?){50}y"])
def test_a_backtracking_context_pattern_is_400_at_once(server, pattern):
    """Issue 54 N1: the context path ran a client's pattern with Python's re (15 s for the
    first, 4.7 s of a frozen process for the second); it now runs in RE2 as the layout
    compiler's does: refused as no time-of-day pattern / unsupported lookaround."""
    prop = json.dumps({"type": "string", "pattern": pattern, "x-diffvoice-context": "mentioned"})
    status, body = post(server, chat(server, with_param(prop)))
    assert status == 400, body
    assert "pattern" in body["error"]["message"]


@pytest.mark.parametrize("words", [1, 2])
def test_narrowing_a_huge_enum_by_many_messages_is_counted_and_refused(server, words):
    """Issue 54 N1: a valid 2,000-value `mentioned` enum with 400 one-character messages took
    21 s; the checks it would make are counted first and refused over the limit."""
    values = [" ".join(f"v{i}w{j}" for j in range(words)) for i in range(2000)]
    prop = json.dumps({"type": "string", "enum": values, "x-diffvoice-context": "mentioned"})
    messages = [{"role": "user", "content": "a"} for _ in range(400)]
    body = json.dumps({"model": "m", "max_tokens": 8, "messages": messages,
                       "tool_choice": "required", "tools": [{"type": "function", "function": {
                           "name": "f", "parameters": {"type": "object",
                                                       "properties": {"x": json.loads(prop)}}}}]})
    status, reply = post(server, body)
    assert status == 400, reply
    assert "value-by-message checks" in reply["error"]["message"]


@pytest.mark.parametrize("keyword,value", [
    ("x-diffvoice-aliases", {"a": 5}), ("x-diffvoice-aliases", [1]),
    ("x-diffvoice-aliases", {"a": [1]}), ("x-diffvoice-context", "bogus"),
    ("x-diffvoice-context", 5)])
def test_the_engines_own_keywords_are_checked_like_any_other(server, keyword, value):
    """Issue 54 N9: `x-diffvoice-aliases: {"a": 5}` or `[1]` was a 500 (the meta-schema lets
    any `x-` value through); now a 400 naming the keyword."""
    prop = {"type": "string", "enum": ["a", "b"], "x-diffvoice-context": "mentioned",
            keyword: value}
    status, body = post(server, chat(server, with_param(json.dumps(prop))))
    assert status == 400, body
    assert keyword in body["error"]["message"]


def test_the_openai_sdk_gets_these_400s_as_bad_request_errors(server):
    """The same refusals as the `openai` client users run sees them: BadRequestError with the
    server's message (a backtracking context pattern, a malformed engine keyword)."""
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
    for prop, named in (({"type": "string", "pattern": r"(\d?\d?\d?\d?\d?:?){6}y",
                          "x-diffvoice-context": "mentioned"}, "pattern"),
                        ({"type": "string", "enum": ["a"], "x-diffvoice-context": "mentioned",
                          "x-diffvoice-aliases": {"a": 5}}, "x-diffvoice-aliases")):
        with pytest.raises(openai.BadRequestError) as raised:
            client.chat.completions.create(
                model="m", max_tokens=8, messages=[{"role": "user", "content": "hello"}],
                tool_choice="required", tools=[{"type": "function", "function": {
                    "name": "f", "parameters": {"type": "object", "properties": {"x": prop}}}}])
        assert raised.value.status_code == 400 and named in str(raised.value)
