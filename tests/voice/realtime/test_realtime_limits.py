"""/v1/realtime behind the same doors as /ws: API keys (the SDK's Authorization header, its
browser subprotocol, ?api_key=), Origin rules, the per-IP cap, the idle timeout, the message
rate and the caller-audio ingest limit, each refusal an `error` event in the SDK's shape before
the close. Real server (the full app), plain WebSockets and the `openai` SDK."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import json

import pytest
import websockets
from openai import AsyncOpenAI
from openai.types.realtime import RealtimeServerEvent
from pydantic import TypeAdapter
from voice_fixtures import LiveServer, scaled

KEY = "sk-realtime-test"
SERVER_EVENT = TypeAdapter(RealtimeServerEvent)


class _AppServer(LiveServer):
    def __init__(self, state) -> None:
        super().__init__(state)
        from diffvoice.voice.cli_serve import build_app

        self.app = build_app(state)
        self.server.config.app = self.app

    def realtime(self, query: str = "") -> str:
        return self.ws_url.rsplit("/ws", 1)[0] + "/v1/realtime" + query


@pytest.fixture(scope="module")
def guarded(voice_state):
    config = voice_state.config.replace(api_keys=(KEY,), idle_timeout_s=1.5,
                                        max_sessions_per_ip=2,
                                        allowed_origins=("https://app.example",),
                                        ws_message_rate=50.0, ws_message_burst=100)
    state = dataclasses.replace(voice_state, config=config, active_sessions=set(),
                                client_slots=None, session_tokens=None)
    with _AppServer(state) as server:
        yield server


async def _until_closed(ws, within: float = 15.0) -> list:
    """Every server event until the close (validated), then the close code and reason."""
    events = []
    try:
        async with asyncio.timeout(scaled(within)):
            async for message in ws:
                events.append(SERVER_EVENT.validate_python(json.loads(message)))
    except websockets.ConnectionClosed:
        pass
    return events


@pytest.mark.parametrize("how", ["none", "wrong"])
async def test_without_a_key_the_socket_is_refused_with_a_reason(guarded, how):
    headers = {"Authorization": "Bearer sk-wrong"} if how == "wrong" else {}
    async with websockets.connect(guarded.realtime(), additional_headers=headers) as ws:
        events = await _until_closed(ws)
    assert [e.error.code for e in events] == ["unauthorized"]
    assert (ws.close_code, ws.close_reason) == (1008, "unauthorized")


async def test_the_sdk_with_its_key_gets_a_session(guarded):
    host = guarded.realtime().split("://", 1)[1].split("/", 1)[0]
    client = AsyncOpenAI(api_key=KEY, websocket_base_url=f"ws://{host}/v1")
    async with client.realtime.connect(model=guarded.state.model_name) as conn:
        event = await asyncio.wait_for(conn.recv(), scaled(30))
        assert event.type == "session.created"


@pytest.mark.parametrize("how", ["subprotocol", "query"])
async def test_browser_forms_of_the_key(guarded, how):
    kwargs = ({"subprotocols": ["realtime", f"openai-insecure-api-key.{KEY}"]}
              if how == "subprotocol" else {})
    url = guarded.realtime(f"?api_key={KEY}" if how == "query" else "")
    async with websockets.connect(url, **kwargs) as ws:
        first = SERVER_EVENT.validate_python(json.loads(await asyncio.wait_for(
            ws.recv(), scaled(30))))
        assert first.type == "session.created"
        if how == "subprotocol":
            assert ws.subprotocol == "realtime"


async def test_a_foreign_page_is_refused(guarded):
    headers = {"Authorization": f"Bearer {KEY}", "Origin": "https://evil.example"}
    async with websockets.connect(guarded.realtime(), additional_headers=headers) as ws:
        events = await _until_closed(ws)
    assert [e.error.code for e in events] == ["origin_not_allowed"]
    assert ws.close_code == 1008


async def test_an_idle_session_is_closed_with_a_reason(guarded):
    headers = {"Authorization": f"Bearer {KEY}"}
    async with websockets.connect(guarded.realtime(), additional_headers=headers) as ws:
        events = await _until_closed(ws, within=20)
    assert [e.type for e in events][:1] == ["session.created"]
    assert [e.error.code for e in events if e.type == "error"] == ["idle_timeout"]
    assert (ws.close_code, ws.close_reason) == (1008, "idle_timeout")


async def test_a_message_flood_is_closed_message_rate(guarded):
    headers = {"Authorization": f"Bearer {KEY}"}
    async with websockets.connect(guarded.realtime(), additional_headers=headers) as ws:
        await asyncio.wait_for(ws.recv(), scaled(30))  # session.created
        clear = json.dumps({"type": "input_audio_buffer.clear"})
        sent = 0
        try:
            for _ in range(2000):
                await ws.send(clear)
                sent += 1
        except websockets.ConnectionClosed:
            pass
        events = await _until_closed(ws)
    assert [e.error.code for e in events if e.type == "error"] == ["message_rate"]
    assert (ws.close_code, ws.close_reason) == (1008, "message_rate")


async def test_audio_faster_than_real_time_is_refused_then_closed(guarded):
    """Two-second appends back to back: past the burst each is refused with an error event
    (never queued), and once the caller is far enough ahead the socket is closed."""
    headers = {"Authorization": f"Bearer {KEY}"}
    two_secs = base64.b64encode(b"\0\1" * 48000).decode()
    async with websockets.connect(guarded.realtime(), additional_headers=headers,
                                  max_size=None) as ws:
        await asyncio.wait_for(ws.recv(), scaled(30))
        try:
            for i in range(40):  # 80 s of audio at once
                await ws.send(json.dumps({"type": "input_audio_buffer.append",
                                          "event_id": f"a{i}", "audio": two_secs}))
        except websockets.ConnectionClosed:
            pass
        events = await _until_closed(ws)
    codes = [e.error.code for e in events if e.type == "error"]
    assert "audio_too_fast" in codes and codes[-1] == "audio_too_fast"
    assert (ws.close_code, ws.close_reason) == (1008, "audio_too_fast")
