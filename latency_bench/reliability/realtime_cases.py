"""Malformed OpenAI-Realtime client events and out-of-order sequences, each with the answer the
server documents (voice/realtime/session.py, voice/realtime/config.py): one `error` event whose
`error.code` is the case's and whose `error.event_id` is the client's event_id (None where the
event could not be read as an object with a usable event_id: invalid JSON, a non-object, a
binary frame, an event over the 256 KiB cap, an event_id that is not a string of at most 128
characters).

Contract: `cases(rng, n) -> list[Case]`: at least `n` malformed events (`Case.malformed`
summed), drawn from a seeded `random.Random`, so a run is reproducible. A `Case` is a list of
`Step`s sent in order on one socket, each awaited before the next:
- `Step(payload, error=code, event_id=...)`: a malformed event, answered by exactly one error;
- `Step(payload, until=type, match=...)`: a valid event, answered by an event of that type (and
  no error);
- `Step(None, until=type, nth=n)`: nothing sent, wait until the case has seen n events of that
  type (a response's `response.done`, which may come while earlier steps are awaited);
- `Step(..., wait=False)`: sent without waiting (the next step's answer covers it);
- a payload may be a function of the events seen so far (`seen[type]` = the latest of each
  type): an id the server made. It returns None when what it needs is missing (the rest of
  the case is skipped and counted as such).
`Case.atomic`: no keep-alive audio may be appended between its steps (a commit on an empty
buffer). Families: bad_json, non_object, bad_type, binary, event_id (edge ids),
session_update, append, huge (just under / over the 256 KiB event cap and the 2 s append cap),
item_create, item_ref (retrieve / delete / truncate of unknown items), response_create,
response_cancel, output_clear, deep (nesting past the parser's limit, and a parseable deep tool
schema), surrogate (lone UTF-16 surrogate escapes), and the sequences seq_commit, seq_items,
seq_response_busy, seq_response_audio, seq_after_error.
Knows nothing about sockets.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

MAX_EVENT_CHARS = 256 * 1024  # the server's cap on one client event (characters)
APPEND_LIMIT = int(2.0 * 48000 * 4 / 3) + 4  # base64 characters of 2 s of 24 kHz PCM16
CLIENT_EVENTS = (
    "session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
    "input_audio_buffer.clear", "conversation.item.create", "conversation.item.delete",
    "conversation.item.retrieve", "conversation.item.truncate", "response.create",
    "response.cancel", "output_audio_buffer.clear",
)  # fmt: skip
_NO_ID = object()  # the event carries no event_id key


@dataclass
class Step:
    payload: str | bytes | Callable[[dict], str | None] | None
    error: str | None = None  # the error code expected (None: a valid event)
    event_id: str | None = None  # the event_id the error must name
    until: str | None = None  # valid: the event type that answers it
    match: Callable[[dict], bool] | None = None
    wait: bool = True
    timeout_s: float = 20.0
    nth: int | None = None  # answered once `until` has come this many times in the case


@dataclass
class Case:
    family: str
    steps: list[Step] = field(default_factory=list)
    atomic: bool = False

    @property
    def malformed(self) -> int:
        return sum(s.error is not None for s in self.steps)


# ------------------------------------------------------------------ building blocks

NOT_STR = [None, True, 0, -1, 1.5, [], ["x"], {}, {"a": 1}]
NOT_DICT = [None, True, 0, 7, 1.5, "x", "", [], [{"a": 1}]]
NOT_LIST = [None, True, 0, 1.5, "x", {}, {"a": 1}]
BAD_TOKENS = [0, -1, 4097, 10**9, 1.5, "10", True, False, None, [], float("inf")]
BAD_MODALITIES = [[], "audio", ["video"], ["audio", 1], [None], {}, None, ["text", "image"]]
BAD_TOOL_NAMES = ["", "a b", "a.b", "x" * 65, 5, None, "a/b", "na:me"]
SERVER_EVENTS = ("session.created", "session.updated", "response.done", "error",
                 "input_audio_buffer.committed", "conversation.item.added", "rate_limits.updated",
                 "response.output_text.delta", "transcription_session.update",
                 "conversation.item.input_audio_transcription.delta", "response.created")
NEAR_MISSES = ("session.update ", " session.update", "Session.update", "session_update",
               "session.update.x", "response.cancel\u0000", "RESPONSE.CREATE", "input_audio_buffer",
               "conversation.item", "response", "session..update", "__init__", "_send",
               "input_audio_buffer.append\n")


def _rand_id(rng: random.Random, i: int) -> str:
    tail = "".join(rng.choice("abcdef0123456789") for _ in range(8))
    return rng.choice([f"evt_{i}_{tail}", f"client-{tail}-{i}", f"é_{i}_{tail}",
                       f"{i}\u4e2d{tail}", f"evt {i} {tail}"])


def _event_id(rng: random.Random, i: int) -> tuple[Any, str | None]:
    """(the event_id to send, or _NO_ID; the event_id the error must name)."""
    r = rng.random()
    if r < 0.80:
        eid = _rand_id(rng, i)
        return eid, eid
    if r < 0.87:
        return _NO_ID, None
    if r < 0.91:
        return "L" * rng.randint(129, 400), None  # over 128 characters: not echoed
    if r < 0.96:
        return rng.choice([5, 0, None, True, ["e"], {"id": "e"}, 1.5]), None
    eid = f"{i}-" + "x" * (128 - len(f"{i}-"))  # exactly 128: echoed
    return eid, eid


def bad_event(rng: random.Random, i: int, event: dict, code: str) -> Step:
    eid, want = _event_id(rng, i)
    if eid is not _NO_ID:
        event = {**event, "event_id": eid}
        if rng.random() < 0.5:  # event_id first, as the SDKs send it
            event = {"event_id": eid, **{k: v for k, v in event.items() if k != "event_id"}}
    return Step(json.dumps(event, ensure_ascii=rng.random() < 0.5), error=code, event_id=want)


def unreadable(payload: str | bytes, code: str) -> Step:
    return Step(payload, error=code, event_id=None)


def _fn(name: str, **extra) -> dict:
    return {"type": "function", "name": name, "description": "",
            "parameters": {"type": "object", "properties": {}}, **extra}


def _deep_schema(levels: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def _text_item(text: str, item_id: str | None = None, role: str = "user") -> dict:
    item = {"type": "message", "role": role,
            "content": [{"type": "input_text" if role != "assistant" else "output_text",
                         "text": text}]}
    if item_id is not None:
        item["id"] = item_id
    return {"type": "conversation.item.create", "item": item}


# ------------------------------------------------------------------ families of single events

def _session_update(rng: random.Random) -> tuple[dict, str]:
    """One session.update with one unusable field -> (event, code)."""
    pick = rng.randrange(18)
    if pick == 0:
        return {"type": "session.update", "session": rng.choice(NOT_DICT)}, "invalid_value"
    if pick == 1:
        return ({"type": "session.update"}, "invalid_value")  # no session at all
    if pick == 2:  # transcription (and other) session types
        kind = rng.choice(["transcription", "translation", None, 5, "realtime2", ""])
        return {"type": "session.update", "session": {"type": kind}}, "unsupported"
    if pick == 3:
        key = rng.choice(["temperature", "voice", "modalities", "input_audio_format",
                          "turn_detection", "input_audio_transcription", "x" * 50, "",
                          "max_response_output_tokens", "tools_choice"])
        return {"type": "session.update", "session": {key: rng.choice([0.8, "alloy", 1])}}, \
            "unknown_parameter"
    if pick == 4:
        value = rng.choice(NOT_STR + ["x" * 32_001])
        return {"type": "session.update", "session": {"instructions": value}}, "invalid_value"
    if pick == 5:
        return ({"type": "session.update", "session": {
            "output_modalities": rng.choice(BAD_MODALITIES)}}, "invalid_value")
    if pick == 6:
        return ({"type": "session.update", "session": {
            "max_output_tokens": rng.choice(BAD_TOKENS)}}, "invalid_value")
    if pick == 7:  # MCP and other non-function tools
        tool = rng.choice([{"type": "mcp", "server_label": "x", "server_url": "http://x"},
                           {"type": "code_interpreter"}, {"type": None}, {"name": "f"},
                           {"type": "file_search"}])
        return ({"type": "session.update", "session": {"tools": [tool]}},
                "unsupported_tool_type")
    if pick == 8:
        bad = rng.choice([
            rng.choice(NOT_LIST),
            [_fn(f"f{k}") for k in range(65)],
            [rng.choice([5, "f", None, []])],
            [_fn("dup"), _fn("dup")],
            [{**_fn("f"), "name": rng.choice(BAD_TOOL_NAMES)}],
            [{**_fn("f"), "parameters": rng.choice(["x", 5, [], True])}],
            [{**_fn("f"), "description": rng.choice([5, [], {}, True])}],
            [{**_fn("f"), "parameters": {"type": "object", "properties": {
                "a": {"type": "strin"}}}}],
        ])
        return {"type": "session.update", "session": {"tools": bad}}, "invalid_value"
    if pick == 9:
        choice = rng.choice(["sometimes", 5, None, {"type": "function", "name": "missing"},
                             {"type": "function"}, {"type": "mcp", "server_label": "x"}, []])
        return ({"type": "session.update", "session": {"tool_choice": choice}},
                "invalid_value")
    if pick == 10:
        return ({"type": "session.update", "session": {
            "model": rng.choice(["gpt-realtime", "gpt-4o-realtime-preview", None, 5, ""])}},
            "invalid_value")
    if pick == 11:
        key = rng.choice(["prompt", "reasoning"])
        value = rng.choice([{"id": "pmpt_1"}, "p", 5, {"effort": "low"}])
        return {"type": "session.update", "session": {key: value}}, "unsupported"
    if pick == 12:  # audio: not objects, unknown sides / fields, formats
        audio, code = rng.choice([
            (rng.choice(NOT_DICT), "invalid_value"),
            ({"middle": {}}, "unknown_parameter"),
            ({"input": rng.choice(NOT_DICT)}, "invalid_value"),
            ({"output": rng.choice(NOT_DICT)}, "invalid_value"),
            ({"input": {"echo_cancellation": True}}, "unknown_parameter"),
            ({"output": {"transcription": {}}}, "unknown_parameter"),
            ({"input": {"format": rng.choice([{"type": "audio/mp3"}, "pcm16", 5, None,
                                               {"type": "audio/pcm", "rate": 16000},
                                               {"type": "audio/wav"}, {}])}}, "invalid_value"),
            ({"output": {"format": {"type": "audio/opus"}}}, "invalid_value"),
            ({"input": {"transcription": rng.choice(["whisper-1", 5, [], True])}},
             "invalid_value"),
            ({"input": {"noise_reduction": rng.choice(["near_field", 5, [], True])}},
             "invalid_value"),
            ({"output": {"voice": rng.choice([5, None, [], True, 1.5])}}, "invalid_value"),
            ({"output": {"speed": rng.choice([1.2, 0.5, 0.25, 1.5])}}, "unsupported"),
            ({"output": {"speed": rng.choice([2.0, 0.1, -1, "fast", None, 1e308])}},
             "invalid_value"),
        ])
        return {"type": "session.update", "session": {"audio": audio}}, code
    if pick in (13, 14, 15):  # turn detection
        td, code = rng.choice([
            (rng.choice(["server_vad", 5, [], True]), "invalid_value"),
            ({"type": rng.choice(["none", "vad", 5, None, "SEMANTIC_VAD"])}, "invalid_value"),
            ({"type": "server_vad", "threshold": rng.choice(
                [-0.1, 1.01, 2, "0.5", True, None, [], float("nan"), float("inf")])},
             "invalid_value"),
            ({"type": "server_vad", "silence_duration_ms": rng.choice(
                [99, 5001, -1, "300", True, None, 1e9])}, "invalid_value"),
            ({"type": "server_vad", "prefix_padding_ms": rng.choice([-1, 5001, "x", []])},
             "invalid_value"),
            ({"type": "server_vad", "idle_timeout_ms": rng.choice([4999, 30001, "x", 0])},
             "invalid_value"),
            ({"type": "server_vad", "eagerness": "high"}, "unknown_parameter"),
            ({"type": "semantic_vad", "eagerness": rng.choice(["very", 1, None, ""])},
             "invalid_value"),
            ({"type": "semantic_vad", "threshold": 0.5}, "unknown_parameter"),
            ({"type": "server_vad", rng.choice(["create_response", "interrupt_response"]):
              rng.choice(["yes", 1, 0, None, []])}, "invalid_value"),
            ({"type": "server_vad", "silence_ms": 300}, "unknown_parameter"),
        ])
        return ({"type": "session.update", "session": {"audio": {"input": {
            "turn_detection": td}}}}, code)
    if pick == 16:  # a valid field, then an unusable one: nothing is applied, one error
        return ({"type": "session.update", "session": {
            "instructions": "Be brief.", "max_output_tokens": rng.choice(BAD_TOKENS)}},
            "invalid_value")
    return ({"type": "session.update", "session": {"tools": [
        {**_fn("deep"), "parameters": _deep_schema(rng.randint(20, 60))}]}}, "invalid_value")


def _append(rng: random.Random) -> tuple[dict, str]:
    pick = rng.randrange(3)
    if pick == 0:
        event = {"type": "input_audio_buffer.append"}
        if rng.random() < 0.8:
            event["audio"] = rng.choice([None, 5, [], {}, True, 1.5, ["AAAA"]])
        return event, "invalid_value"
    if pick == 1:  # not base64: characters outside the alphabet, or a length that can't be
        alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
        n = rng.choice([1, 2, 3, 5, 6, 7]) + 4 * rng.randint(0, 200)
        audio = rng.choice(["!!!!", "AAA", "A===", "====", "AAAA!", " AAAA", "AA==AA==", "é",
                            "AAAA\n", "data:audio/pcm;base64,AAAA",
                            "".join(rng.choice(alphabet) for _ in range(n))])
        return {"type": "input_audio_buffer.append", "audio": audio}, "invalid_value"
    return ({"type": "input_audio_buffer.append", "audio": "AAAA" * rng.randint(
        APPEND_LIMIT // 4 + 1, APPEND_LIMIT // 4 + 200)}, "audio_too_large")


def _item_create(rng: random.Random) -> tuple[dict, str]:
    msg = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
    pick = rng.randrange(11)
    if pick == 0:
        return {"type": "conversation.item.create", "item": rng.choice(NOT_DICT)}, \
            "invalid_value"
    if pick == 1:  # image input
        content = [{"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}]
        if rng.random() < 0.5:
            content.insert(0, {"type": "input_text", "text": "what is this?"})
        return ({"type": "conversation.item.create", "item": {**msg, "content": content}},
                "unsupported")
    if pick == 2:  # audio content (it must be streamed)
        part = rng.choice([{"type": "input_audio", "audio": "AAAA"}, {"type": "input_audio"},
                           {"type": "audio", "audio": "AAAA"}])
        return ({"type": "conversation.item.create", "item": {**msg, "content": [part]}},
                "unsupported")
    if pick == 3:
        return ({"type": "conversation.item.create", "item": {
            **msg, "role": rng.choice(["robot", None, 5, "tool", "developer", "", "USER"])}},
            "invalid_value")
    if pick == 4:
        content = rng.choice([None, "hi", [], {}, [5], [{"type": "input_text"}],
                              [{"type": "input_text", "text": 5}], [{"type": "foo", "text": "x"}],
                              [{"text": "x"}], [{"type": "output_audio"}],
                              [{"type": "input_file", "file_id": "f"}], [None]])
        return ({"type": "conversation.item.create", "item": {**msg, "content": content}},
                "invalid_value")
    if pick == 5:  # insert mid-conversation
        return ({"type": "conversation.item.create", "item": msg,
                 "previous_item_id": rng.choice(["nope", "item_0", 5, "root", []])},
                "unsupported")
    if pick == 6:
        return ({"type": "conversation.item.create", "item": {
            "type": "function_call", "name": "f", "call_id": "c", "arguments": "{}"}},
            "unsupported")
    if pick == 7:
        return ({"type": "conversation.item.create", "item": {
            "type": rng.choice(["mcp_call", "item_reference", None, 5, "", "function"]),
            "id": "x"}}, "unsupported")
    if pick == 8:  # a function call's output for a call nobody made
        return ({"type": "conversation.item.create", "item": {
            "type": "function_call_output",
            "call_id": f"call_{rng.randrange(10**9)}", "output": '{"ok": true}'}},
            "invalid_value")
    if pick == 9:
        item = {"type": "function_call_output", "call_id": rng.choice([5, None, [], "c"]),
                "output": rng.choice([{"a": 1}, 5, None, []])}
        return {"type": "conversation.item.create", "item": item}, "invalid_value"
    return ({"type": "conversation.item.create", "item": {**msg, "id": "i" * rng.randint(
        65, 300)}}, "invalid_value")


def _item_ref(rng: random.Random) -> tuple[dict, str]:
    kind = rng.choice(["conversation.item.retrieve", "conversation.item.delete",
                       "conversation.item.truncate"])
    event: dict = {"type": kind}
    if rng.random() < 0.85:
        event["item_id"] = rng.choice([f"item_{rng.randrange(10**9):09d}", "", 5, None, [],
                                       "x" * 500])
    if kind == "conversation.item.truncate":
        event.update(content_index=rng.choice([0, 1, "x"]), audio_end_ms=rng.choice(
            [0, 100, -1, "x", None]))
    return event, "item_not_found"


def _response_create(rng: random.Random) -> tuple[dict, str]:
    pick = rng.randrange(13)
    r: Any
    if pick == 0:
        return ({"type": "response.create", "response": rng.choice([5, "x", [], True, 1.5])},
                "invalid_value")
    if pick == 1:  # out-of-band responses
        r, code = {"conversation": rng.choice(["none", "other", 5, "", []])}, "unsupported"
    elif pick == 2:
        r, code = {"input": rng.choice([[], [{"type": "item_reference", "id": "x"}], None,
                                        "x"])}, "unsupported"
    elif pick == 3:
        r, code = {"instructions": rng.choice(NOT_STR + ["y" * 32_001])}, "invalid_value"
    elif pick == 4:
        r, code = {"output_modalities": rng.choice(BAD_MODALITIES)}, "invalid_value"
    elif pick == 5:
        r, code = {"tools": [{"type": "mcp", "server_label": "x"}]}, "unsupported_tool_type"
    elif pick == 6:
        r, code = {"tools": rng.choice([5, "x", [5], [_fn("d"), _fn("d")]])}, "invalid_value"
    elif pick == 7:
        r, code = {"tool_choice": rng.choice(["sometimes", 5, {"type": "function",
                                                             "name": "x"}])}, "invalid_value"
    elif pick == 8:
        r, code = {"max_output_tokens": rng.choice(BAD_TOKENS)}, "invalid_value"
    elif pick == 9:
        r, code = {"metadata": rng.choice(["x", 5, [], {f"k{k}": "v" for k in range(17)}])}, \
            "invalid_value"
    elif pick == 10:
        r, code = {"prompt": {"id": "pmpt_1"}}, "unsupported"
    elif pick == 11:
        r, code = rng.choice([({"audio": rng.choice(["x", 5, []])}, "invalid_value"),
                              ({"audio": {"output": {"speed": 1.2}}}, "unsupported"),
                              ({"audio": {"output": {"voice": 5}}}, "invalid_value"),
                              ({"audio": {"output": 5}}, "invalid_value")])
    else:
        r, code = {rng.choice(["temperature", "voice", "modalities", "conversation_id",
                               "response_id"]): 1}, "unknown_parameter"
    return {"type": "response.create", "response": r}, code


def _bad_type(rng: random.Random) -> dict:
    pick = rng.randrange(5)
    if pick == 0:
        return {} if rng.random() < 0.3 else {"audio": "AAAA", "session": {}}
    if pick == 1:
        return {"type": rng.choice([None, 5, [], {}, True, 1.5, ["session.update"]])}
    if pick == 2:
        return {"type": rng.choice(SERVER_EVENTS + ("", "x" * 10_000))}
    if pick == 3:
        return {"type": rng.choice(NEAR_MISSES)}
    letters = "abcdefghijklmnopqrstuvwxyz._"
    while True:
        kind = "".join(rng.choice(letters) for _ in range(rng.randint(1, 40)))
        if kind not in CLIENT_EVENTS:
            return {"type": kind}


BAD_JSON = ["", " ", "{", "}", '{"type":', '{"type":"session.update",}', "[1,2", "tru", "nul",
            "{'type': 'response.cancel'}", '"unterminated', '{"type":"response.cancel"} x',
            '{"type":"response.cancel"}{"type":"response.cancel"}', "{type:response.cancel}",
            '{"type":"response.cancel",,}', "\u0000", "\ufeff{}", "/* */{}", "{\"a\":01}",
            '{"type":"response.cancel","event_id":"e1"', "0x10", "+1", ".5", "[,]"]
NON_OBJECT = ["[]", "1", '"response.cancel"', "null", "true", "false", "-0", "1e999", "NaN",
              "-Infinity", '[{"type":"response.cancel"}]', "[[]]", '"\\u00e9"', "3.14"]


def _bad_json(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(BAD_JSON)
    while True:  # a valid event cut short
        text = json.dumps({"type": rng.choice(CLIENT_EVENTS), "event_id": "e1",
                           "session": {"instructions": "hello"}})
        cut = text[: rng.randint(1, len(text) - 1)]
        try:
            json.loads(cut)
        except ValueError:
            return cut


# ------------------------------------------------------------------ sequences

def _is(kind: str, **fields) -> Callable[[dict], bool]:
    def match(event: dict) -> bool:
        return event.get("type") == kind and all(
            _path(event, path) == want for path, want in fields.items())
    return match


def _path(event: dict, path: str) -> Any:
    value: Any = event
    for key in path.split("__"):
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _seq_commit(rng: random.Random, i: int) -> Case:
    """clear, optionally a little audio (< 100 ms), then commit: nothing to commit."""
    steps = [Step(json.dumps({"type": "input_audio_buffer.clear"}),
                  until="input_audio_buffer.cleared")]
    if rng.random() < 0.5:
        ms = rng.choice([10, 20, 40, 60, 80, 90])
        audio = base64.b64encode(bytes(48 * ms)).decode()
        steps.append(Step(json.dumps({"type": "input_audio_buffer.append", "audio": audio}),
                          wait=False))
    steps.append(bad_event(rng, i, {"type": "input_audio_buffer.commit"},
                           "input_audio_buffer_commit_empty"))
    return Case("seq_commit", steps, atomic=True)


def _seq_items(rng: random.Random, i: int) -> Case:
    """An item's life: made, made again, truncated (not an assistant's audio), retrieved,
    deleted; then every reference to it is item_not_found."""
    x = f"item_fz_{i}_{rng.randrange(10**6)}"
    steps = [
        Step(json.dumps(_text_item("My name is Test.", x)), until="conversation.item.done",
             match=_is("conversation.item.done", item__id=x)),
        bad_event(rng, i, _text_item("again", x), "invalid_value"),
        bad_event(rng, i, {"type": "conversation.item.truncate", "item_id": x,
                           "content_index": 0, "audio_end_ms": 0}, "invalid_value"),
        Step(json.dumps({"type": "conversation.item.retrieve", "item_id": x}),
             until="conversation.item.retrieved",
             match=_is("conversation.item.retrieved", item__id=x)),
        Step(json.dumps({"type": "conversation.item.delete", "item_id": x}),
             until="conversation.item.deleted",
             match=_is("conversation.item.deleted", item_id=x)),
        bad_event(rng, i, {"type": "conversation.item.retrieve", "item_id": x},
                  "item_not_found"),
        bad_event(rng, i, {"type": "conversation.item.delete", "item_id": x}, "item_not_found"),
        bad_event(rng, i, {"type": "conversation.item.truncate", "item_id": x,
                           "content_index": 0, "audio_end_ms": 0}, "item_not_found"),
    ]
    return Case("seq_items", steps)


QUESTIONS = ("What time do you open on Monday?", "Can I book a checkup for Friday?",
             "Do you take new patients?", "Where are you located?")


def _seq_response_busy(rng: random.Random, i: int) -> Case:
    """A spoken response (active while its audio plays, paced at real time); while it runs:
    response.create again, a valid and a bad session.update, a cancel naming another response;
    after it: cancel with nothing to cancel, function_call_output for an unknown call, then a
    text-only response."""
    steps = [
        Step(json.dumps(_text_item(rng.choice(QUESTIONS))), until="conversation.item.done"),
        Step(json.dumps({"type": "response.create", "response": {"max_output_tokens": 24}}),
             wait=False),
        bad_event(rng, i, {"type": "response.create"},
                  "conversation_already_has_active_response"),
        Step(json.dumps({"type": "session.update", "session": {"instructions":
                                                                "Answer in one sentence."}}),
             until="session.updated"),
        bad_event(rng, i, {"type": "session.update", "session": {"max_output_tokens": -5}},
                  "invalid_value"),
        bad_event(rng, i, {"type": "response.cancel", "response_id": "resp_not_this_one"},
                  "response_cancel_not_active"),
        Step(None, until="response.done", nth=1, timeout_s=90.0),
        bad_event(rng, i, {"type": "response.cancel"}, "response_cancel_not_active"),
        bad_event(rng, i, {"type": "conversation.item.create", "item": {
            "type": "function_call_output", "call_id": "call_unknown", "output": "{}"}},
            "invalid_value"),
        Step(json.dumps({"type": "response.create", "response": {
            "output_modalities": ["text"], "max_output_tokens": 16}}), wait=False),
        Step(None, until="response.done", nth=2, timeout_s=90.0),
    ]
    return Case("seq_response_busy", steps)


def _assistant_item(seen: dict) -> str | None:
    done = seen.get("response.done") or {}
    for item in (done.get("response") or {}).get("output") or []:
        if item.get("type") == "message" and item.get("role") == "assistant":
            return item.get("id")
    return None


def _ref(kind: str, **extra) -> Callable[[dict], str | None]:
    def payload(seen: dict) -> str | None:
        item_id = _assistant_item(seen)
        return None if item_id is None else json.dumps({"type": kind, "item_id": item_id,
                                                        **extra})
    return payload


def _seq_response_audio(rng: random.Random, i: int) -> Case:
    """A spoken response, then truncates of its item past its audio and at content 1 (errors),
    a valid truncate, its delete, and a retrieve of the deleted item."""
    def bad(kind: str, code: str, **extra) -> Step:
        eid = f"evt_audio_{i}_{rng.randrange(10**9)}"
        return Step(_ref(kind, event_id=eid, **extra), error=code, event_id=eid)

    steps = [
        Step(json.dumps(_text_item(rng.choice(QUESTIONS))), until="conversation.item.done"),
        Step(json.dumps({"type": "response.create", "response": {"max_output_tokens": 24}}),
             until="response.created", nth=1),
        Step(None, until="response.done", nth=1, timeout_s=120.0),
        bad("conversation.item.truncate", "invalid_value", content_index=0,
            audio_end_ms=10**7),
        bad("conversation.item.truncate", "invalid_value", content_index=1, audio_end_ms=0),
        Step(_ref("conversation.item.truncate", content_index=0, audio_end_ms=0),
             until="conversation.item.truncated"),
        Step(_ref("conversation.item.delete"), until="conversation.item.deleted"),
        bad("conversation.item.retrieve", "item_not_found"),
    ]
    return Case("seq_response_audio", steps)


def _seq_after_error(rng: random.Random, i: int) -> Case:
    """A malformed event, then at once a valid one: it is answered as if nothing happened."""
    x = f"item_ae_{i}_{rng.randrange(10**6)}"
    first = rng.choice([unreadable(rng.choice(BAD_JSON), "invalid_json"),
                        unreadable(bytes(rng.randrange(256) for _ in range(16)), "invalid_event"),
                        bad_event(rng, i, {"type": "response.cancel"},
                                  "response_cancel_not_active")])
    first.wait = False
    return Case("seq_after_error", [
        first,
        Step(json.dumps(_text_item("after an error", x)), until="conversation.item.done",
             match=_is("conversation.item.done", item__id=x)),
        Step(json.dumps({"type": "conversation.item.delete", "item_id": x}),
             until="conversation.item.deleted"),
    ])


# ------------------------------------------------------------------ the mix

def _single(rng: random.Random, i: int, family: str) -> Case:
    if family == "bad_json":
        return Case(family, [unreadable(_bad_json(rng), "invalid_json")])
    if family == "non_object":
        return Case(family, [unreadable(rng.choice(NON_OBJECT), "invalid_event")])
    if family == "bad_type":
        return Case(family, [bad_event(rng, i, _bad_type(rng), "invalid_event")])
    if family == "binary":
        payload = rng.choice([b"", bytes(rng.randrange(256) for _ in range(rng.randint(
            1, 2000))), b'{"type":"response.cancel"}', bytes(640)])
        return Case(family, [unreadable(payload, "invalid_event")])
    if family == "event_id":  # ids at the edges, on an event that is an error anyway
        eid = rng.choice(["x" * 128, "x" * 129, "", " ", "\u0000", "\U0001F600" * 32,
                          "\u00e9" * 128, "\u00e9" * 129])
        want = eid if len(eid) <= 128 else None
        return Case(family, [Step(json.dumps({"type": "response.cancel", "event_id": eid}),
                                  error="response_cancel_not_active", event_id=want)])
    if family == "session_update":
        return Case(family, [bad_event(rng, i, *_session_update(rng))])
    if family == "append":
        return Case(family, [bad_event(rng, i, *_append(rng))])
    if family == "huge":
        return Case(family, [_huge(rng, i)])
    if family == "item_create":
        return Case(family, [bad_event(rng, i, *_item_create(rng))])
    if family == "item_ref":
        return Case(family, [bad_event(rng, i, *_item_ref(rng))])
    if family == "response_create":
        return Case(family, [bad_event(rng, i, *_response_create(rng))])
    if family == "response_cancel":
        event = {"type": "response.cancel"}
        if rng.random() < 0.6:
            event["response_id"] = rng.choice(["resp_1", 5, None, "", "x" * 300])
        return Case(family, [bad_event(rng, i, event, "response_cancel_not_active")])
    if family == "output_clear":
        return Case(family, [bad_event(rng, i, {"type": "output_audio_buffer.clear"},
                                       "unsupported")])
    if family == "deep":
        return Case(family, [_deep(rng, i)])
    if family == "surrogate":
        return Case(family, [_surrogate(rng, i)])
    raise ValueError(family)


def _huge(rng: random.Random, i: int) -> Step:
    pick = rng.randrange(4)
    eid = f"evt_huge_{i}"
    if pick == 0:  # just under the event cap: the append's audio is over its 2 s cap
        head = json.dumps({"type": "input_audio_buffer.append", "event_id": eid, "audio": ""})
        room = MAX_EVENT_CHARS - len(head) - rng.randint(0, 64)
        audio = "AAAA" * (room // 4)
        return Step(json.dumps({"type": "input_audio_buffer.append", "event_id": eid,
                                "audio": audio}), error="audio_too_large", event_id=eid)
    if pick == 1:  # just over the event cap: refused before it is parsed (no event_id)
        head = json.dumps({"type": "input_audio_buffer.append", "event_id": eid, "audio": ""})
        audio = "AAAA" * ((MAX_EVENT_CHARS - len(head)) // 4 + rng.randint(1, 16))
        return Step(json.dumps({"type": "input_audio_buffer.append", "event_id": eid,
                                "audio": audio}), error="event_too_large", event_id=None)
    if pick == 2:  # valid base64 of just over 2 s of 24 kHz PCM16
        pcm = bytes(96_000 + 2 * rng.randint(1, 2000))
        return Step(json.dumps({"type": "input_audio_buffer.append", "event_id": eid,
                                "audio": base64.b64encode(pcm).decode()}),
                    error="audio_too_large", event_id=eid)
    # just under the cap, as instructions far over their 32,000 characters
    head = json.dumps({"type": "session.update", "event_id": eid,
                       "session": {"instructions": ""}})
    text = "z" * (MAX_EVENT_CHARS - len(head) - rng.randint(1, 64))
    return Step(json.dumps({"type": "session.update", "event_id": eid,
                            "session": {"instructions": text}}),
                error="invalid_value", event_id=eid)


def _deep(rng: random.Random, i: int) -> Step:
    n = rng.randint(2_000, 30_000)  # past the parser's depth, under the 256 KiB cap
    pick = rng.randrange(4)
    if pick == 0:
        return unreadable("[" * n + "]" * n, "invalid_json")
    if pick == 1:
        return unreadable('{"a":' * n + "1" + "}" * n, "invalid_json")
    if pick == 2:  # deep inside a valid envelope: the whole event is unreadable
        return unreadable('{"type":"session.update","event_id":"e","session":'
                          + '{"a":' * n + "1" + "}" * n + "}", "invalid_json")
    eid = f"evt_deep_{i}"  # parseable, but a tool schema deeper than the engine takes
    return Step(json.dumps({"type": "session.update", "event_id": eid, "session": {"tools": [
        {**_fn("deep"), "parameters": _deep_schema(rng.randint(20, 60))}]}}),
        error="invalid_value", event_id=eid)


def _surrogate(rng: random.Random, i: int) -> Step:
    lone = rng.choice(["\\ud800", "\\udfff", "\\uDBFF", "\\ud83d", "\\ude00x"])
    pick = rng.randrange(4)
    if pick == 0:
        return unreadable('{"type":"' + lone + '"}', "invalid_json")
    if pick == 1:
        return unreadable('{"type":"conversation.item.create","event_id":"e' + lone + '"}',
                          "invalid_json")
    if pick == 2:
        return unreadable('{"type":"conversation.item.create","item":{"type":"message",'
                          '"role":"user","content":[{"type":"input_text","text":"a' + lone
                          + '"}]}}', "invalid_json")
    eid = f"evt_pair_{i}_\U0001F600"  # sent as a valid escaped pair: named in the error
    return Step('{"type":"\\ud83d\\ude00","event_id":' + json.dumps(eid) + "}",
                error="invalid_event", event_id=eid)


SINGLE = {"bad_json": 8, "non_object": 5, "bad_type": 8, "binary": 4, "event_id": 3,
          "session_update": 20, "append": 8, "huge": 2, "item_create": 12, "item_ref": 6,
          "response_create": 10, "response_cancel": 3, "output_clear": 1, "deep": 2,
          "surrogate": 3}
SEQUENCES = {"seq_commit": 4, "seq_items": 3, "seq_after_error": 3}


def cases(rng: random.Random, n: int, busy_responses: int = 2,
          audio_responses: int = 1) -> list[Case]:
    """At least n malformed events: the weighted single-event families and the cheap
    sequences, plus `busy_responses` / `audio_responses` response sequences (which run the
    model: counted, not weighted)."""
    out = [_seq_response_busy(rng, 900_000 + k) for k in range(busy_responses)]
    out += [_seq_response_audio(rng, 950_000 + k) for k in range(audio_responses)]
    weights = {**SINGLE, **SEQUENCES}
    names, w = list(weights), list(weights.values())
    i = 0
    while sum(c.malformed for c in out) < n:
        family = rng.choices(names, w)[0]
        if family == "seq_commit":
            out.append(_seq_commit(rng, i))
        elif family == "seq_items":
            out.append(_seq_items(rng, i))
        elif family == "seq_after_error":
            out.append(_seq_after_error(rng, i))
        else:
            out.append(_single(rng, i, family))
        i += 1
    rng.shuffle(out)
    return out
