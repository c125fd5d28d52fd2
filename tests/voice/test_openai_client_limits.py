"""Every /v1 request is counted before it runs (issue 54 N2, N4), through the real router on
loopback with a random-weight engine and the openai SDK:
- one client's concurrency and token budget (429 naming the limit, Retry-After), while another
  address is served;
- every part of a message counts against max_prompt_chars (8,000 one-character messages, a
  100 KB tool_call argument: 400 before the template or the agent's rules see them; they used to
  pass, the first holding the event loop for 19 s);
- the API's share of the engine full: 429, not 503;
- Tokenizer.dropped, now one render of marked messages, against the old text search on random
  conversations."""

from __future__ import annotations

import dataclasses
import http.client
import json
import random
import time
import urllib.parse

import openai
import pytest
from test_openai_api import TIMEOUT_S, _Config, _engine, _LoopbackServer, _State

from diffvoice.engine.requests import MESSAGE_CHARS, prompt_chars
from diffvoice.engine.scheduler import PriorityRefused
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.voice.openai_api.client_limits import ClientLimits, client_key
from diffvoice.voice.openai_api.common import _engine_errors
from diffvoice.voice.openai_api.request import OpenAIError


@dataclasses.dataclass(frozen=True)
class _LimitedConfig(_Config):
    api_client_concurrency: int = 2
    api_client_tokens_per_min: int = 0


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("limits") / "m", family="sdar",
                                  init_std=0.5)
    engine = _engine(path, max_running=4)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    server = _LoopbackServer(_State(engine, _LimitedConfig()))
    yield server
    server.close()


def _body(content="hello", **extra):
    return {"model": "m", "temperature": 0, "max_tokens": 8,
            "messages": [{"role": "user", "content": content}], **extra}


class _Client:
    """HTTP requests whose connections come from loopback address `ip` (one client)."""

    def __init__(self, server, ip: str) -> None:
        url = urllib.parse.urlsplit(server.base_url)
        self.host, self.port, self.path, self.ip = url.hostname, url.port, url.path, ip

    def open(self, body: dict) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT_S,
                                          source_address=(self.ip, 0))
        conn.request("POST", f"{self.path}/chat/completions", json.dumps(body),
                     {"Content-Type": "application/json"})
        return conn, conn.getresponse()

    def post(self, body: dict) -> tuple[int, dict, dict]:
        conn, reply = self.open(body)
        try:
            return reply.status, json.loads(reply.read()), dict(reply.getheaders())
        finally:
            conn.close()


def test_one_client_past_its_concurrency_gets_429_and_others_are_served(server):
    long = _body(max_tokens=600, ignore_eos=True, stream=True)
    a, b = _Client(server, "127.0.0.2"), _Client(server, "127.0.0.3")
    streams = []
    try:
        for _ in range(2):  # both in flight: their first chunk arrived
            conn, reply = a.open(long)
            streams.append(conn)
            assert reply.status == 200
            assert reply.readline().startswith(b"data: ")
        status, body, headers = a.post(_body())
        assert status == 429, body
        assert body["error"]["code"] == "rate_limit_exceeded"
        assert "api_client_concurrency=2" in body["error"]["message"]
        assert int(headers["retry-after"]) >= 1
        assert b.post(_body())[0] == 200  # another address: served
    finally:
        for conn in streams:
            conn.close()
    # the streams' leases come back when they close (the server sees the disconnect)
    deadline = time.monotonic() + TIMEOUT_S
    while (status := a.post(_body())[0]) == 429 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert status == 200


def test_token_budget_through_the_openai_sdk(engine):
    config = _LimitedConfig(api_client_concurrency=0, api_client_tokens_per_min=100)
    server = _LoopbackServer(_State(engine, config))
    try:
        client = server.client()
        client.chat.completions.create(model="m", max_tokens=60,
                                       messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(model="m", max_tokens=60,
                                           messages=[{"role": "user", "content": "hi"}])
        assert "api_client_tokens_per_min=100" in str(caught.value)
        assert int(caught.value.response.headers["retry-after"]) >= 1
    finally:
        server.close()


@pytest.mark.parametrize("case", ["8000 tiny messages", "100 KB of tool_call arguments",
                                  "a long tool name"])
def test_every_prompt_part_counts_against_max_prompt_chars(server, engine, case):
    if case == "8000 tiny messages":
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": "a"}
                    for i in range(8000)]
    else:
        arguments = json.dumps({"note": "x" * 100_000}) if "arguments" in case else "{}"
        name = "f" * 70_000 if "name" in case else "f"
        messages = [{"role": "user", "content": "book it"},
                    {"role": "assistant", "content": None, "tool_calls": [{
                        "id": "c1", "type": "function",
                        "function": {"name": name, "arguments": arguments}}]},
                    {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    assert sum(len(m.get("content") or "") for m in messages) < 10_000  # content alone passes
    passes = engine.total_passes
    status, body, _ = _Client(server, "127.0.0.4").post(
        {"model": "m", "max_tokens": 8, "messages": messages})
    assert status == 400, body
    assert "max_prompt_chars" in body["error"]["message"]
    assert engine.total_passes == passes


def test_prompt_chars_counts_every_string_and_each_message():
    messages = [{"role": "user", "content": [{"type": "text", "text": "hello"}]},
                {"role": "assistant", "tool_calls": [{"id": "c", "function": {
                    "name": "book", "arguments": "{\"day\": \"monday\"}"}}]}]
    strings = ["role", "user", "content", "type", "text", "text", "hello", "role", "assistant",
               "tool_calls", "id", "c", "function", "name", "book", "arguments",
               "{\"day\": \"monday\"}"]
    assert prompt_chars(messages) == 2 * MESSAGE_CHARS + sum(map(len, strings))
    assert prompt_chars("raw prompt") == 10


def test_client_limits_refill_and_release():
    now = [0.0]
    limits = ClientLimits(max_concurrent=1, tokens_per_minute=600, clock=lambda: now[0])
    lease = limits.admit("ip:a", 500)
    with pytest.raises(OpenAIError) as caught:  # concurrency first
        limits.admit("ip:a", 1)
    assert caught.value.status == 429 and "api_client_concurrency=1" in caught.value.message
    lease.release()
    lease.release()  # idempotent
    with pytest.raises(OpenAIError) as caught:  # 100 tokens left of 600
        limits.admit("ip:a", 200)
    assert caught.value.retry_after_s == 10  # 100 more at 10 tokens/s
    now[0] = 10.0
    limits.admit("ip:a", 200).release()
    limits.admit("ip:b", 10_000).release()  # more than a minute's worth: charged one minute
    assert limits.refused == {"concurrency": 1, "tokens": 1}


def test_client_key_is_the_api_key_when_the_server_has_keys():
    assert client_key(("10.0.0.1", 5), "Bearer sk-1", ("sk-1",)).startswith("key:")
    assert client_key(("10.0.0.1", 5), "Bearer sk-1", ()) == "ip:10.0.0.1"
    assert client_key(("10.0.0.1", 5), None, ("sk-1",)) == "ip:10.0.0.1"


def test_the_apis_share_of_the_engine_full_is_429():
    error = _engine_errors(PriorityRefused("engine is full for priority 1"))
    assert error.status == 429 and error.code == "rate_limit_exceeded"


def _dropped_by_search(tokenizer, messages):
    """The old Tokenizer.dropped: each message's text looked for in the rendered prompt."""
    prompt = tokenizer.render(messages).lower()
    out = {}
    for m in messages:
        text = " ".join(str(m.get("content") or "").lower().split())
        if text and text not in prompt:
            key = "system" if m.get("role") in ("system", "developer") else "history"
            out[key] = out.get(key, 0) + 1
    return out


def test_dropped_matches_the_text_search_on_random_conversations():
    from diffvoice.engine import DEFAULT_MODEL_DIR
    from diffvoice.engine.tokenizer import ChatTokenizer

    tokenizer = ChatTokenizer.from_dir(DEFAULT_MODEL_DIR)
    rng = random.Random(54)
    words = ["monday", "crown", "nine", "cleaning", "thanks", "book", "when", "open"]
    for _ in range(40):
        n = rng.randint(1, 9)
        roles = (["system"] if rng.random() < 0.5 else []) + \
            [("user", "assistant")[i % 2] for i in range(n)]
        messages = [{"role": r, "content": " ".join(rng.choices(words, k=rng.randint(1, 6)))
                     + f" {i}"} for i, r in enumerate(roles)]
        assert tokenizer.dropped(messages) == _dropped_by_search(tokenizer, messages), messages


def test_lease_is_released_when_a_non_streamed_request_fails(server):
    """A 400 from the engine (after admission) gives the concurrency place back."""
    bad = _body(block_size=3)  # refused by the engine's preparation, after admission
    c = _Client(server, "127.0.0.5")
    for _ in range(3):  # more than api_client_concurrency=2
        assert c.post(bad)[0] == 400
    assert c.post(_body())[0] == 200



