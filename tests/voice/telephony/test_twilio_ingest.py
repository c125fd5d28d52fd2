"""Issue 39, item 4 on the Twilio surface (real uvicorn + router + pipeline): a stream flooding
six-second media messages is closed 1008 "audio_too_fast" after a bounded amount of audio
(before the fix: 200 of them accepted in 5.8 s); a stream sending Twilio's 20 ms frames in real
time is never refused."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path

import pytest
import websockets
from conftest import scaled
from fastapi import FastAPI
from twilio_peer import TwilioPeer

from diffvoice.voice.telephony.media_stream import MAX_MEDIA_PAYLOAD_CHARS
from diffvoice.voice.telephony.twilio import ActiveCalls, make_router

REPO = Path(__file__).resolve().parents[3]
TINY_WHISPER = REPO / "tests" / "assets" / "whisper-tiny-random"
SIX_SECONDS = b"\xff" * 48000  # 8 kHz mu-law silence; base64: 64 000 chars
MAX_FLOOD_MESSAGES = 200


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("m") / "ckpt", family="sdar")
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=4, device="cpu"))
    yield eng
    eng.close()


@pytest.fixture
def state(engine, tmp_path):
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    # no signature checks: this is about the media, not the stream credential
    config = ServeConfig(model="random", device="cpu", asr=str(TINY_WHISPER), stop_secs=0.3,
                         max_new_tokens=8, twilio_auth_token="ingest-test", twilio_validate=False,
                         latency_log=str(tmp_path / "latency.jsonl"))
    return AppState.create(config, engine)


async def _wait(predicate, within_s, what):
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def _peer(url: str, n: int) -> TwilioPeer:
    sid = "CA" + str(n) * 32
    return TwilioPeer(url, call_sid=sid, stream_sid="MZ" + str(n) * 32,
                      parameters={"CallSid": sid, "From": "+1555", "To": "+1556"})


@pytest.mark.timeout(scaled(120))
async def test_flood_of_six_second_media_is_closed_audio_too_fast(live_server, state):
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(state, calls=calls))
    payload = base64.b64encode(SIX_SECONDS).decode()
    assert len(payload) <= MAX_MEDIA_PAYLOAD_CHARS  # each one is a valid media message
    with live_server(app) as (_http, ws_base):
        async with _peer(ws_base + "/telephony/twilio/stream", 4) as peer:
            peer._tasks[0].cancel()  # no paced sender: this peer floods
            await _wait(lambda: len(calls) == 1, scaled(15), "the call to start")
            sent = 0
            try:
                for sent in range(1, MAX_FLOOD_MESSAGES + 1):
                    await peer._ws.send(json.dumps({
                        "event": "media", "streamSid": peer.stream_sid,
                        "media": {"track": "inbound", "chunk": str(sent), "payload": payload}}))
                    await asyncio.sleep(0)  # let the peer see a close that arrived
            except websockets.ConnectionClosed:
                pass
            await _wait(lambda: peer.close_code is not None, scaled(15), "the close")
            assert (peer.close_code, peer._ws.close_reason) == (1008, "audio_too_fast")
            assert sent < 50, sent  # closed after ~3 messages, not after all of them
            await _wait(lambda: len(calls) == 0, scaled(15), "the call to end")


@pytest.mark.timeout(scaled(120))
async def test_real_time_stream_is_never_refused(live_server, state):
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(state, calls=calls))
    with live_server(app) as (_http, ws_base):
        async with _peer(ws_base + "/telephony/twilio/stream", 5) as peer:
            await _wait(lambda: len(calls) == 1, scaled(15), "the call to start")
            await asyncio.sleep(6.0)  # 300 media messages of 20 ms, paced in real time
            assert peer.close_code is None and len(calls) == 1
