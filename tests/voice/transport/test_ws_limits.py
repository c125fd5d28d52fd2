"""Issue 12 on the real server (build_app on loopback): /ws admission (Origin, API keys and
session tokens, per-IP cap), handshake and idle reaping, JSON edge cases, empty first frame,
frames over 1 MiB; /healthz, /metrics and /session-token with --api-keys; 413 and 400s on /v1.
Issue 54: a flood of empty frames is closed `message_rate` (N5; counted here by the session, as
this server runs uvicorn's plain protocol), empty frames do not keep a silent session open (N5),
browser sessions stop at their share of max_sessions (N6).

Uses the random-weight engine and tiny Whisper of tests/voice/conftest.py; every wait is
bounded."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import urllib.error
import urllib.request

import pytest
import websockets
from voice_fixtures import LiveServer, scaled

from diffvoice.voice.transport import protocol

KEY = "sk-rel-test"


class _AppServer(LiveServer):
    """LiveServer, but serving the full app (voice.cli_serve.build_app: /v1, Twilio too)."""

    def __init__(self, state) -> None:
        super().__init__(state)
        from diffvoice.voice.cli_serve import build_app

        self.app = build_app(state)
        self.server.config.app = self.app


def _state(voice_state, **changes):
    config = voice_state.config.replace(**changes)
    return dataclasses.replace(voice_state, config=config, active_sessions=set(),
                               client_slots=None, session_tokens=None)


@pytest.fixture(scope="module")
def limited(voice_state):
    state = _state(voice_state, idle_timeout_s=1.5, handshake_timeout_s=1.5,
                   max_sessions_per_ip=2, allowed_origins=("https://app.example",),
                   ws_message_rate=50.0, ws_message_burst=100, max_browser_sessions=3)
    with _AppServer(state) as server:
        yield server


@pytest.fixture(autouse=True)
async def _previous_sessions_closed(request):
    """Sessions of the previous test release their per-IP slot only once their pipeline has
    shut down (after the client saw the close): wait for that, so tests do not interfere."""
    if "limited" in request.fixturenames:
        await _slots_free(request.getfixturevalue("limited"))
    yield


@pytest.fixture(scope="module")
def keyed(voice_state):
    with _AppServer(_state(voice_state, api_keys=(KEY,))) as server:
        yield server


async def _close_of(url: str, first=None, headers=None, within_s=10.0, **connect):
    """Connect, optionally send `first`, read until the server closes: (error codes, close)."""
    errors = []
    async with websockets.connect(url, max_size=None, additional_headers=headers or {},
                                  ping_interval=None, **connect) as ws:
        if first is not None:
            try:  # a refused socket may already be closed; its error event is still read
                await ws.send(first)
            except websockets.ConnectionClosed:
                pass
        try:
            async with asyncio.timeout(scaled(within_s)):
                async for message in ws:
                    if isinstance(message, str):
                        event = protocol.decode_server(message)
                        if isinstance(event, protocol.Error):
                            errors.append(event.code)
        except websockets.ConnectionClosed:
            pass
        return errors, ws.close_code, ws.close_reason


def _http(url, data=None, headers=None, method=None):
    request = urllib.request.Request(url, data=data, headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=scaled(30)) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.mark.parametrize("frame", [
    "1" * 5000,                                   # int over Python's 4300-digit limit
    "[" * 5000 + "]" * 5000,                      # deep nesting
    '{"type": "session.start", "config": {"stop_secs": ' + "9" * 4400 + "}}",
    '{"type": "\\ud800"}',                         # lone surrogate
    "",                                           # empty first text frame
], ids=["huge_int", "deep", "huge_int_field", "surrogate", "empty"])
async def test_json_edge_cases_close_1007_bad_json(limited, frame):
    errors, code, reason = await _close_of(limited.ws_url, frame)
    assert (errors, code, reason) == (["bad_json"], 1007, "bad_json")


async def test_frame_over_1_mib_closes_1009(limited):
    errors, code, _ = await _close_of(limited.ws_url, b"\0" * ((1 << 20) + 2))
    assert code == 1009 and errors == []  # the WebSocket layer refuses it (docs/protocol.md)


async def test_silent_socket_closed_by_handshake_timeout(limited):
    errors, code, reason = await _close_of(limited.ws_url, None)
    assert (errors, code, reason) == (["handshake_timeout"], 1008, "handshake_timeout")


async def test_idle_session_reaped(limited):
    loop = asyncio.get_running_loop()
    errors = []
    async with websockets.connect(limited.ws_url, ping_interval=None) as ws:
        await ws.send(protocol.SessionStart(config={}).encode())
        started = protocol.decode_server(await asyncio.wait_for(ws.recv(), scaled(30)))
        assert isinstance(started, protocol.SessionStarted)
        t0 = loop.time()  # the idle clock starts when the session does
        try:
            async with asyncio.timeout(scaled(10)):
                async for message in ws:
                    event = protocol.decode_server(message)
                    if isinstance(event, protocol.Error):
                        errors.append(event.code)
        except websockets.ConnectionClosed:
            pass
        assert (errors, ws.close_code, ws.close_reason) == (
            ["idle_timeout"], 1008, "idle_timeout")
    assert 1.4 < loop.time() - t0 < scaled(4)


async def _slots_free(server) -> None:
    for _ in range(int(scaled(20) / 0.05)):  # earlier sessions of this module are closing
        if server.state.client_slots.held() == 0:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{server.state.client_slots.held()} per-IP slots still held")


async def test_per_ip_cap_and_release(limited):
    start = protocol.SessionStart(config={}).encode()
    await _slots_free(limited)
    async with websockets.connect(limited.ws_url) as a, websockets.connect(limited.ws_url) as b:
        for ws in (a, b):
            await ws.send(start)
            assert isinstance(protocol.decode_server(await asyncio.wait_for(ws.recv(), 20)),
                              protocol.SessionStarted)
        errors, code, reason = await _close_of(limited.ws_url, start)
        assert (errors, code, reason) == (["too_many_sessions"], 1013, "too_many_sessions")
    await _slots_free(limited)  # both closed: their slots come back


@pytest.mark.parametrize("origin,allowed", [
    ("https://evil.example", False), ("http://localhost:5173", True),
    ("https://app.example", True), (None, True)])
async def test_origin_allow_list(limited, origin, allowed):
    await _slots_free(limited)
    headers = {"Origin": origin} if origin else {}
    errors, code, reason = await _close_of(limited.ws_url, protocol.Ping().encode(), headers,
                                           within_s=4)
    if allowed:
        assert "origin_not_allowed" not in errors and code in (1008, None) and \
            reason != "origin_not_allowed"
    else:
        assert (errors, code, reason) == (["origin_not_allowed"], 1008, "origin_not_allowed")


async def test_api_keys_guard_ws_metrics_and_health(keyed):
    ping = protocol.Ping().encode()
    errors, code, reason = await _close_of(keyed.ws_url, ping)
    assert (errors, code, reason) == (["unauthorized"], 1008, "unauthorized")

    async def accepted(url, headers=None) -> bool:
        async with websockets.connect(url, additional_headers=headers or {}) as ws:
            await ws.send(protocol.SessionStart(config={}).encode())
            return isinstance(protocol.decode_server(await asyncio.wait_for(ws.recv(), 20)),
                              protocol.SessionStarted)

    assert await accepted(keyed.ws_url, {"Authorization": f"Bearer {KEY}"})
    status, _ = await asyncio.to_thread(_http, keyed.url + "/session-token", b"", method="POST")
    assert status == 401
    status, body = await asyncio.to_thread(
        _http, keyed.url + "/session-token", b"", {"Authorization": f"Bearer {KEY}"}, "POST")
    assert status == 200
    token = json.loads(body)["token"]
    assert await accepted(f"{keyed.ws_url}?token={token}")
    errors, code, _ = await _close_of(f"{keyed.ws_url}?token=1.{'0' * 64}", ping)
    assert errors == ["unauthorized"]

    status, _ = await asyncio.to_thread(_http, keyed.url + "/metrics")
    assert status == 401
    status, body = await asyncio.to_thread(_http, keyed.url + "/metrics", None,
                                           {"Authorization": f"Bearer {KEY}"})
    assert status == 200 and b"diffvoice_engine_callers" in body
    assert b"process_resident_memory_bytes" in body and b"process_open_fds" in body
    status, body = await asyncio.to_thread(_http, keyed.url + "/healthz")
    assert status == 200 and json.loads(body) == {"status": "ok"}
    status, body = await asyncio.to_thread(_http, keyed.url + "/healthz", None,
                                           {"Authorization": f"Bearer {KEY}"})
    assert "engine" in json.loads(body)
    assert (await asyncio.to_thread(_http, keyed.url + "/docs"))[0] == 404


def _chat(server, body: bytes):
    return _http(server.url + "/v1/chat/completions", body,
                 {"Content-Type": "application/json"})


@pytest.mark.parametrize("name", ["seed_2_64", "seed_negative", "huge_int", "deep",
                                  "surrogate", "long_prompt"])
def test_v1_client_mistakes_are_400(limited, name):
    model = limited.state.model_name

    def body(**extra):
        return json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}],
                           "max_tokens": 4, **extra}).encode()

    bodies = {
        "seed_2_64": body(seed=2**64, temperature=0.5),
        "seed_negative": body(seed=-1, temperature=0.5),
        "huge_int": body(seed=0).replace(b'"seed": 0', b'"seed": ' + b"7" * 5000),
        "deep": b'{"model": "m", "x": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        "surrogate": body().replace(b'"hi"', b'"\\udc00"'),
        "long_prompt": json.dumps({"model": model, "max_tokens": 4, "messages": [
            {"role": "user", "content": "x" * 70000}]}).encode(),
    }
    status, answer = _chat(limited, bodies[name])
    assert status == 400, answer[:300]
    assert json.loads(answer)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/telephony/twilio/voice"])
async def test_bodies_over_limit_are_413_before_they_are_sent(limited, path):
    """The answer comes back while the client has sent only the headers (1 MiB /v1, 64 KiB
    Twilio webhook), so a huge body is never read."""
    size = (1 << 20) + 1 if path.startswith("/v1") else (64 << 10) + 1
    reader, writer = await asyncio.open_connection("127.0.0.1", limited.port)
    writer.write(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {size}\r\n"
                 "Content-Type: application/json\r\n\r\n".encode())
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(4096), scaled(10))
    writer.close()
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer


async def test_late_session_start_still_counts(limited):
    """The lead's report: under load session.start can arrive after 0.5 s; as long as it is the
    first message (within handshake_timeout_s) its overrides apply, no late_session_start."""
    await _slots_free(limited)
    async with websockets.connect(limited.ws_url) as ws:
        await asyncio.sleep(1.0)  # the old first-message wait was 0.5 s
        await ws.send(protocol.SessionStart(config={"stop_secs": 0.7}).encode())
        started = protocol.decode_server(await asyncio.wait_for(ws.recv(), scaled(20)))
    assert isinstance(started, protocol.SessionStarted) and started.stop_secs == 0.7


async def test_audio_first_means_defaults(limited):
    await _slots_free(limited)
    async with websockets.connect(limited.ws_url) as ws:
        await ws.send(b"\0" * 640)
        started = protocol.decode_server(await asyncio.wait_for(ws.recv(), scaled(20)))
    assert isinstance(started, protocol.SessionStarted)
    assert started.stop_secs == limited.state.config.stop_secs


async def _start(url: str, **connect):
    ws = await websockets.connect(url, ping_interval=None, **connect)
    await ws.send(protocol.SessionStart(config={}).encode())
    started = protocol.decode_server(await asyncio.wait_for(ws.recv(), scaled(20)))
    assert isinstance(started, protocol.SessionStarted)
    return ws


async def _errors_and_close(ws, within_s: float):
    errors = []
    try:
        async with asyncio.timeout(scaled(within_s)):
            async for message in ws:
                if isinstance(message, str):
                    event = protocol.decode_server(message)
                    if isinstance(event, protocol.Error):
                        errors.append(event.code)
    except websockets.ConnectionClosed:
        pass
    return errors, ws.close_code, ws.close_reason


async def test_a_flood_of_empty_frames_is_closed_message_rate(limited):
    """Issue 54 N5: 29 000 empty frames a second were never closed (no audio, no audio limit)."""
    await _slots_free(limited)
    ws = await _start(limited.ws_url)
    try:
        for _ in range(1000):  # 10x the burst, as fast as the socket takes them
            await ws.send(b"")
    except websockets.ConnectionClosed:
        pass
    assert await _errors_and_close(ws, 10) == (["message_rate"], 1008, "message_rate")


async def test_empty_frames_do_not_keep_a_silent_session_open(limited):
    """Issue 54 N5: an empty frame every 20 s kept a silent session past idle_timeout_s."""
    await _slots_free(limited)
    loop = asyncio.get_running_loop()
    ws = await _start(limited.ws_url)
    t0 = loop.time()

    async def trickle():  # well under the message rate, and never any audio
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await ws.send(b"")
                await ws.send(b"\0\0")  # one sample
                await asyncio.sleep(0.2)

    sender = asyncio.create_task(trickle())
    try:
        result = await _errors_and_close(ws, 6)
    finally:
        sender.cancel()
    assert result == (["idle_timeout"], 1008, "idle_timeout")
    assert 1.4 < loop.time() - t0 < scaled(4)


async def test_browser_sessions_leave_the_phone_share(limited):
    """Issue 54 N6: silent browser sessions from a few IPs took every line of max_sessions,
    locking phone callers out. Here 3 browser sessions (max_browser_sessions) from two IPs
    fill the browsers' share; a fourth, from a third IP, is refused while lines remain."""
    await _slots_free(limited)
    opened = [await _start(limited.ws_url), await _start(limited.ws_url),
              await _start(limited.ws_url, local_addr=("127.0.0.2", 0))]
    try:
        assert limited.state.sessions_open() < limited.state.config.max_sessions
        errors, code, reason = await _close_of(limited.ws_url, protocol.Ping().encode(),
                                               local_addr=("127.0.0.3", 0))
        assert (errors, code, reason) == (["overloaded"], 1013, "overloaded")
    finally:
        for ws in opened:
            await ws.close()
    await _slots_free(limited)


async def test_a_call_whose_output_stalls_is_closed_output_stalled(limited, monkeypatch):
    """Issue 54 N7: the call's output transport gives up (as pipecat's does after a write over
    its timeout: push_error, permanent) 0.3 s into the call; the session is closed 1013
    `output_stalled` with an error event, not left connected without audio."""
    from diffvoice.voice.transport import ws_session
    from diffvoice.voice.transport.browser import BrowserTransport

    class StallingTransport(BrowserTransport):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            out, start = self.output(), self.output().start

            async def stall_soon(frame):
                await start(frame)

                async def stall():
                    await asyncio.sleep(0.3)
                    await out.push_error("write timed out (test)", force_treat_as_permanent=True)

                out.stall_task = asyncio.ensure_future(stall())

            out.start = stall_soon

    monkeypatch.setattr(ws_session, "BrowserTransport", StallingTransport)
    await _slots_free(limited)
    ws = await _start(limited.ws_url)

    async def stream_audio():  # a live caller: not idle
        with contextlib.suppress(websockets.ConnectionClosed):
            while True:
                await ws.send(b"\0" * 640)
                await asyncio.sleep(0.02)

    sender = asyncio.create_task(stream_audio())
    try:
        result = await _errors_and_close(ws, 5)
    finally:
        sender.cancel()
    assert result == (["output_stalled"], 1013, "output_stalled")
