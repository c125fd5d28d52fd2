"""Malformed inputs for every surface, each with the outcome the docs promise for it.

Contract: `ws_cases(rng, n)`, `webhook_cases(rng, n)`, `stream_cases(rng, n)`, `v1_cases(rng, n,
model)` each return n `Case`s drawn (seeded) from the families below, `schema_cases(rng, n,
model)` n /v1 requests whose tools / response_format come from the hostile-schema generator
(latency_bench.reliability.schemas: 200 or any 4xx, never 5xx); `media_garbage(rng)` is
one malformed Media Streams message for use after a valid `start`. A Case holds what to send
and what must come back: for /ws the error code + close code (docs/protocol.md), for the
Twilio stream the close code (voice/telephony/handshake.py), for HTTP the allowed statuses.
Pure: no I/O.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

from diffvoice.voice.transport import protocol


@dataclass
class Case:
    surface: str
    family: str
    payload: Any  # str | bytes for sockets; (headers, body) for HTTP
    expect_code: str | None = None  # /ws error code (None: no error event, e.g. 1009)
    expect_close: int | None = None
    expect_status: tuple[int, ...] = ()
    extra: dict = field(default_factory=dict)


def _junk(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("{}[]\":,abc 019\\\n\t") for _ in range(n))


def _deep(rng: random.Random) -> str:
    d = rng.randint(2000, 6000)
    return "[" * d + "]" * d if rng.random() < 0.5 else '{"a":' * d + "1" + "}" * d


def _huge_int(rng: random.Random) -> str:
    return str(rng.randint(1, 9)) + "7" * rng.randint(4400, 6000)


def _surrogate(rng: random.Random) -> str:
    return rng.choice(["\\ud800", "\\udbff", "\\udc00", "\\udfff", "a\\ud834b"])


def ws_cases(rng: random.Random, n: int) -> list[Case]:
    c = protocol.ERROR_CLOSE_CODES
    families = [
        ("not_json", lambda: _junk(rng, rng.randint(1, 300)) + "}", "bad_json"),
        ("empty_text", lambda: "", "bad_json"),
        ("huge_int", lambda: _huge_int(rng), "bad_json"),
        ("huge_int_field", lambda: '{"type":"session.start","config":{"stop_secs":'
         + _huge_int(rng)[:5000] + "}}", "bad_json"),
        ("deep_nesting", lambda: _deep(rng)[:16000], "bad_json"),
        ("lone_surrogate", lambda: '{"type":"' + _surrogate(rng) + '"}', "bad_json"),
        ("not_an_object", lambda: rng.choice(["1", "[]", '"x"', "null", "true", "[1,2]"]),
         "not_an_object"),
        ("missing_type", lambda: json.dumps(rng.choice([{}, {"type": 1}, {"kind": "ping"},
                                                        {"type": None}])), "missing_type"),
        ("unknown_type", lambda: json.dumps({"type": rng.choice(
            ["dance", "session.started", "pong", "error", "bot.text", "x" * 50])}),
         "unknown_type"),
        ("bad_field", lambda: json.dumps({"type": "session.start", "config": rng.choice([
            {"stop_secs": "fast"}, {"stop_secs": -1}, {"stop_secs": 99}, {"stop_secs": True},
            {"stop_secs": None}])}) if rng.random() < 0.8 else
         '{"type":"session.start","config":{"stop_secs":NaN}}', "bad_field"),
        ("config_not_object", lambda: json.dumps({"type": "session.start", "config": [1]}),
         "bad_field"),
        ("odd_pcm", lambda: rng.randbytes(2 * rng.randint(0, 500) + 1), "odd_pcm"),
        ("audio_too_large", lambda: bytes(protocol.MAX_AUDIO_FRAME_BYTES + 2 * rng.randint(1, 99)),
         "frame_too_large"),
        ("text_too_large", lambda: '{"type":"ping","x":"' + "a" * protocol.MAX_TEXT_FRAME_CHARS
         + '"}', "frame_too_large"),
        ("over_1_mib", lambda: bytes((1 << 20) + 2), None),
    ]
    out = []
    for i in range(n):
        name, make, code = families[i % len(families)]
        out.append(Case("ws", name, make(), code, c[code] if code else 1009))
    return out


WEBHOOK_FIELDS = {"CallSid": "CA" + "0" * 32, "AccountSid": "AC" + "0" * 32, "From": "+15550100",
                  "To": "+15550199", "CallStatus": "ringing", "Direction": "inbound"}


def webhook_cases(rng: random.Random, n: int) -> list[Case]:
    """`extra["sign"]` says whether the runner signs the form (a valid Twilio signature)."""
    families = [
        ("unsigned", lambda: dict(WEBHOOK_FIELDS), False, (403,)),
        ("bad_signature", lambda: dict(WEBHOOK_FIELDS), "bogus", (403,)),
        ("garbage_form_unsigned", lambda: _junk(rng, rng.randint(1, 400)), False, (400, 403)),
        ("body_over_limit", lambda: {"CallSid": "CA1", "x": "y" * (70 << 10)}, True, (413,)),
        ("not_utf8", lambda: b"CallSid=\xff\xfe" + rng.randbytes(20), False, (400,)),
        ("signed_no_call_sid", lambda: {k: v for k, v in WEBHOOK_FIELDS.items()
                                        if k != "CallSid"}, True, (400,)),
        ("signed_call_sid_600", lambda: {**WEBHOOK_FIELDS, "CallSid": "CA" + "9" * 600}, True,
         (400,)),
        ("signed_from_600", lambda: {**WEBHOOK_FIELDS, "From": "+1" + "5" * 600}, True, (400,)),
    ]
    out = []
    for i in range(n):
        name, make, sign, statuses = families[i % len(families)]
        out.append(Case("webhook", name, make(), expect_status=statuses, extra={"sign": sign}))
    return out


def _start(call_sid: str, **changes) -> dict:
    start = {"accountSid": "AC" + "0" * 32, "streamSid": "MZ" + "1" * 32, "callSid": call_sid,
             "tracks": ["inbound"], "customParameters": {},
             "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}
    start.update(changes)
    return {"event": "start", "streamSid": start["streamSid"], "start": start}


def stream_cases(rng: random.Random, n: int) -> list[Case]:
    """Handshake violations; payload is the list of messages to send (close code expected)."""
    connected = json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})
    sid = "CA" + "5" * 32
    families = [
        ("binary_first", lambda: [rng.randbytes(rng.randint(1, 200))], 1007),
        ("not_json", lambda: [_junk(rng, rng.randint(1, 200)) + "}"], 1007),
        ("huge_int", lambda: [_huge_int(rng)], 1007),
        ("deep_nesting", lambda: [_deep(rng)], 1007),
        ("lone_surrogate", lambda: ['{"event":"' + _surrogate(rng) + '"}'], 1007),
        ("not_an_object", lambda: [rng.choice(["[]", "1", "null", '"start"'])], 1007),
        ("media_before_start", lambda: [connected, json.dumps({"event": "media"})], 1008),
        ("connected_twice", lambda: [connected, connected], 1008),
        ("start_without_sids", lambda: [json.dumps({"event": "start", "start": {}})], 1007),
        ("bad_media_format", lambda: [json.dumps(_start(sid, mediaFormat={
            "encoding": "audio/l16", "sampleRate": 16000, "channels": 1}))], 1003),
        ("custom_params_not_strings", lambda: [json.dumps(_start(sid, customParameters={
            "token": 5}))], 1007),
        ("missing_token", lambda: [connected, json.dumps(_start(sid))], 1008),
        ("forged_token", lambda: [json.dumps(_start(sid, customParameters={
            "token": "f" * 64}))], 1008),
    ]
    out = []
    for i in range(n):
        name, make, close = families[i % len(families)]
        out.append(Case("stream", name, make(), expect_close=close))
    return out


def media_garbage(rng: random.Random) -> str | bytes:
    """One malformed message inside a healthy call (skipped and logged by the server)."""
    return rng.choice([
        lambda: "[1, 2, 3]",
        lambda: json.dumps({"event": "media", "media": "not an object"}),
        lambda: json.dumps({"event": "media", "media": {"payload": "%%%" + _junk(rng, 20)}}),
        lambda: json.dumps({"event": "media", "media": {"payload": rng.randint(0, 9)}}),
        lambda: json.dumps({"event": "dtmf", "dtmf": "5"}),
        lambda: '{"event": "media", "n": ' + _huge_int(rng) + "}",
        lambda: '{"event": "' + _surrogate(rng) + '"}',
        lambda: _junk(rng, 50),
        lambda: rng.randbytes(30),
    ])()


def v1_cases(rng: random.Random, n: int, model: str) -> list[Case]:
    def body(**extra):
        return {"model": model, "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4, **extra}

    def dumps(obj) -> bytes:
        return json.dumps(obj).encode()

    families = [
        ("not_json", lambda: _junk(rng, rng.randint(1, 500)).encode(), (400,)),
        ("huge_int", lambda: dumps(body(seed=0)).replace(b'"seed": 0', b'"seed": '
                                                          + _huge_int(rng).encode()), (400,)),
        ("deep_nesting", lambda: b'{"model":"m","x":' + _deep(rng).encode() + b"}", (400,)),
        ("lone_surrogate", lambda: dumps(body()).replace(b'"hi"', b'"' + _surrogate(rng)
                                                          .encode() + b'"'), (400,)),
        ("not_an_object", lambda: rng.choice([b"[]", b"1", b"null"]), (400,)),
        ("seed_out_of_range", lambda: dumps(body(temperature=0.7, seed=rng.choice(
            [2**63, 2**64, 2**70, -1]))), (400,)),
        ("bad_types", lambda: dumps(body(**rng.choice([{"temperature": "hot"},
                                                       {"max_tokens": -5}, {"stream": "yes"},
                                                       {"stop": [1]}, {"n": 3}]))), (400,)),
        ("bad_messages", lambda: dumps({"model": model, "messages": rng.choice(
            [[], "hi", [{"role": "robot", "content": "x"}], [{"role": "user"}]])}), (400,)),
        ("unknown_param", lambda: dumps(body(frobnicate=1)), (400,)),
        ("unknown_model", lambda: dumps({**body(), "model": "nope-" + str(rng.random())}),
         (404,)),
        ("prompt_too_long", lambda: dumps({**body(), "messages": [
            {"role": "user", "content": "x" * rng.randint(70_000, 900_000)}]}), (400,)),
        ("body_over_limit", lambda: b" " * ((1 << 20) + rng.randint(1, 1000)), (413,)),
    ]
    out = []
    for i in range(n):
        name, make, statuses = families[i % len(families)]
        out.append(Case("v1", name, make(), expect_status=statuses))
    return out


SCHEMA_STATUSES = (200, *range(400, 500))


def schema_cases(rng: random.Random, n: int, model: str) -> list[Case]:
    """Generated schemas (schemas.hostile_request) in otherwise valid greedy requests."""
    from diffvoice.latency_bench.reliability.schemas import hostile_request

    out = []
    for _ in range(n):
        tools, choice, fmt = hostile_request(rng)
        body: dict[str, Any] = {"model": model, "max_tokens": 8, "temperature": 0,
                                "messages": [{"role": "user", "content": "hi"}]}
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
        if fmt is not None:
            body["response_format"] = fmt
        # NaN / 1e400 (inf) as the generator gives them: json writes NaN / Infinity
        out.append(Case("v1", "generated_schema", json.dumps(body).encode(),
                        expect_status=SCHEMA_STATUSES))
    return out
