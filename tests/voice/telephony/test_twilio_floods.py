"""Issue 54 on the Twilio Media Stream (real uvicorn + router + pipeline on loopback):

- N5: a flood of messages after `start` (empty `media`, marks) is closed 1008 "message_rate"
  (counted by the call, as this server runs uvicorn's plain WebSocket protocol); `media` with an
  empty payload is no caller audio, so a stream sending only those is closed "idle_timeout";
- sockets that never send `start` are capped per client IP and in all (before: 200 accepted).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import websockets
from conftest import scaled
from fastapi import FastAPI
from twilio_peer import TwilioPeer

from diffvoice.voice.telephony import signature
from diffvoice.voice.telephony.twilio import PENDING_REASON, ActiveCalls, make_router

REPO = Path(__file__).resolve().parents[3]
TINY_WHISPER = REPO / "tests" / "assets" / "whisper-tiny-random"
TOKEN = "floods-test-token"


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("m") / "ckpt", family="sdar")
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=4, device="cpu"))
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def state(engine, tmp_path_factory):
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    log = tmp_path_factory.mktemp("log") / "latency.jsonl"
    config = ServeConfig(model="random", device="cpu", asr=str(TINY_WHISPER), stop_secs=0.3,
                         max_new_tokens=8, twilio_auth_token=TOKEN, idle_timeout_s=1.5,
                         latency_log=str(log), ws_message_rate=50.0, ws_message_burst=100)
    return AppState.create(config, engine)


def _params(call_sid: str) -> dict:
    return {"CallSid": call_sid, "From": "+1555", "To": "+1556",
            "token": signature.stream_token(TOKEN, call_sid, caller="+1555")}


async def _wait(predicate, within_s, what):
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def _ends(state) -> list[dict]:
    lines = Path(state.config.latency_log).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == "end"]


def _empty_media(sid: str) -> str:
    return json.dumps({"event": "media", "streamSid": sid, "media": {"payload": ""}})


@pytest.mark.timeout(scaled(60))
async def test_a_message_flood_after_start_is_closed_message_rate(live_server, state):
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(state, calls=calls))
    with live_server(app) as (_http, ws_base):
        sid, stream = "CA" + "5" * 32, "MZ" + "5" * 32
        async with TwilioPeer(ws_base + "/telephony/twilio/stream", call_sid=sid,
                              stream_sid=stream, parameters=_params(sid)) as peer:
            await _wait(lambda: len(calls) == 1, scaled(15), "the call to start")
            try:
                for _ in range(1000):  # 10x the burst, as fast as the socket takes them
                    await peer._ws.send(_empty_media(stream))
            except websockets.ConnectionClosed:
                pass
            await _wait(lambda: peer.close_code is not None, scaled(10), "the close")
            assert (peer.close_code, peer._ws.close_reason) == (1008, "message_rate")
            await _wait(lambda: len(calls) == 0, scaled(15), "the call to end")
    assert _ends(state)[-1]["closed_by_server"] == "message_rate"


@pytest.mark.timeout(scaled(60))
async def test_empty_media_do_not_keep_a_silent_stream_open(live_server, state):
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(state, calls=calls))
    with live_server(app) as (_http, ws_base):
        sid, stream = "CA" + "6" * 32, "MZ" + "6" * 32
        async with TwilioPeer(ws_base + "/telephony/twilio/stream", call_sid=sid,
                              stream_sid=stream, parameters=_params(sid)) as peer:
            peer._tasks[0].cancel()  # no real audio from now on
            await _wait(lambda: len(calls) == 1, scaled(15), "the call to start")
            t0 = time.monotonic()
            while peer.close_code is None and time.monotonic() - t0 < scaled(6):
                try:  # an empty media message 5 times a second: far under the message rate
                    await peer._ws.send(_empty_media(stream))
                except websockets.ConnectionClosed:
                    break
                await asyncio.sleep(0.2)
            await _wait(lambda: peer.close_code is not None, scaled(2), "the close")
            assert (peer.close_code, peer._ws.close_reason) == (1008, "idle_timeout")
            assert time.monotonic() - t0 < scaled(4)
            await _wait(lambda: len(calls) == 0, scaled(15), "the call to end")


async def _close_within(ws, within_s: float):
    try:
        await asyncio.wait_for(ws.recv(), within_s)
    except websockets.ConnectionClosed:
        return ws.close_code, ws.close_reason
    except TimeoutError:
        return None


async def test_sockets_waiting_for_start_are_capped_per_ip_and_in_all(live_server):
    from diffvoice.voice.config import ServeConfig

    config = ServeConfig(twilio_auth_token=TOKEN, handshake_timeout_s=30.0,
                         max_pending_streams=3, max_pending_streams_per_ip=2)
    app = FastAPI()
    router = make_router(SimpleNamespace(config=config))
    app.include_router(router)
    with live_server(app) as (_http, ws_base):
        url = ws_base + "/telephony/twilio/stream"
        held = [await websockets.connect(url), await websockets.connect(url)]
        third = await websockets.connect(url)  # same IP: over the per-IP cap
        assert await _close_within(third, 2) == (1013, PENDING_REASON)
        held.append(await websockets.connect(url, local_addr=("127.0.0.2", 0)))
        fourth = await websockets.connect(url, local_addr=("127.0.0.3", 0))  # over the total
        assert await _close_within(fourth, 2) == (1013, PENDING_REASON)
        assert router.pending.held() == 3
        for ws in held:  # still waiting for their 'start': open until the handshake timeout
            assert await _close_within(ws, 0.1) is None
            await ws.close()
        await _wait(lambda: router.pending.held() == 0, scaled(5), "the slots back")
