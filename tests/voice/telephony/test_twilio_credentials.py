"""Issue 39, item 5: the Twilio stream credential is single use, bound to its CallSid and caller,
and short-lived; phone streams have their own cap, so they cannot lock browser callers out.

Real uvicorn + the telephony router on loopback; the phone calls run a pass-through pipeline
(transport in -> transport out: this is about admission, not answers); the browser caller in
the last test runs the real pipeline (random-weight engine, tiny Whisper, espeak)."""

from __future__ import annotations

import asyncio
import json
import time
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
import websockets
from conftest import scaled
from fastapi import FastAPI
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from test_twilio_signature import reference_signature
from test_twilio_webhook import post

from diffvoice.voice.telephony import signature
from diffvoice.voice.telephony.twilio import ActiveCalls, make_router

TOKEN = "credentials-test-token"
FROM = "+15550100"


def passthrough(state, transport, *, session_id, audio_out_sample_rate=8000, **_):
    pipeline = Pipeline([transport.input(), transport.output()])
    params = PipelineParams(audio_in_sample_rate=16000, audio_out_sample_rate=audio_out_sample_rate)
    return pipeline, PipelineWorker(pipeline, params=params, enable_rtvi=False)


def sid(n: int) -> str:
    return f"CA{n:032d}"


class Stream:
    """One Twilio-like Media Stream: connected + start, then silence every 20 ms."""

    def __init__(self, ws_base: str, call_sid: str, parameters: dict[str, str]):
        self.url = ws_base + "/telephony/twilio/stream"
        self.call_sid, self.parameters = call_sid, parameters
        self.closed: tuple[int | None, str] | None = None

    async def __aenter__(self):
        self.ws = await websockets.connect(self.url, ping_interval=None)
        await self.ws.send(json.dumps({"event": "connected", "protocol": "Call", "version": "1"}))
        stream_sid = "MZ" + self.call_sid[2:]
        await self.ws.send(json.dumps({"event": "start", "streamSid": stream_sid, "start": {
            "streamSid": stream_sid, "callSid": self.call_sid, "accountSid": "AC" + "0" * 32,
            "customParameters": self.parameters, "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
        self._tasks = [asyncio.create_task(self._media(stream_sid)),
                       asyncio.create_task(self._read())]
        return self

    async def _media(self, stream_sid: str) -> None:
        payload = "/" * 212 + "=="  # 160 bytes of 0xff: mu-law silence
        while True:
            await self.ws.send(json.dumps({"event": "media", "streamSid": stream_sid,
                                           "media": {"payload": payload}}))
            await asyncio.sleep(0.02)

    async def _read(self) -> None:
        try:
            async for _ in self.ws:
                pass
        except websockets.ConnectionClosed:
            pass
        self.closed = (self.ws.close_code, self.ws.close_reason or "")

    async def refusal(self) -> tuple[int | None, str]:
        deadline = time.monotonic() + scaled(15)
        while self.closed is None:
            assert time.monotonic() < deadline, "the stream was not closed"
            await asyncio.sleep(0.02)
        return self.closed

    async def __aexit__(self, *exc):
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.ws.close()


async def wait_until(predicate, what: str) -> None:
    deadline = time.monotonic() + scaled(15)
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.03)


def params_for(call_sid: str, token: str, caller: str = FROM) -> dict[str, str]:
    return {"CallSid": call_sid, "From": caller, "To": "+15550199", "token": token}


def _phone_app(tmp_path):
    config = SimpleNamespace(public_url=None, twilio_auth_token=TOKEN, twilio_validate=True,
                             latency_log=str(tmp_path / "log.jsonl"), max_sessions=32,
                             twilio_claims_db=str(tmp_path / "claims.sqlite3"))
    calls = ActiveCalls()
    app = FastAPI()
    router = make_router(SimpleNamespace(config=config), calls=calls, build_pipeline=passthrough)
    app.include_router(router)
    return app, calls


@pytest.fixture
def phone_app(tmp_path):
    return _phone_app(tmp_path)


async def test_a_webhook_replayed_after_a_restart_opens_nothing(live_server, tmp_path):
    """Issue 54 N8: claims lived in memory only, so after a restart a captured signed webhook
    (which mints a fresh, valid token) opened a stream as the original caller. The restarted
    server here is a new router (new memory) over the same claims file."""
    first_app, first_calls = _phone_app(tmp_path)
    with live_server(first_app) as (_http, ws_base):
        token = signature.stream_token(TOKEN, sid(30), caller=FROM)
        async with Stream(ws_base, sid(30), params_for(sid(30), token)):
            await wait_until(lambda: len(first_calls) == 1, "the call's stream to start")
    restarted, calls = _phone_app(tmp_path)
    with live_server(restarted) as (_http, ws_base):
        fresh = signature.stream_token(TOKEN, sid(30), caller=FROM)  # the replayed webhook's
        async with Stream(ws_base, sid(30), params_for(sid(30), fresh)) as replay:
            assert await replay.refusal() == (1008, "call already has a stream")
        other = signature.stream_token(TOKEN, sid(31), caller=FROM)  # a new call still opens
        async with Stream(ws_base, sid(31), params_for(sid(31), other)):
            await wait_until(lambda: len(calls) == 1, "a new call's stream to start")


def test_token_expires_and_is_bound_to_call_and_caller():
    now = 1_800_000_000.0
    token = signature.stream_token(TOKEN, sid(1), caller=FROM, now=now)
    check = signature.check_stream_token
    assert check(TOKEN, sid(1), token, caller=FROM, now=now + 59) is None
    assert check(TOKEN, sid(1), token, caller=FROM, now=now + 61) == "expired"
    assert check(TOKEN, sid(2), token, caller=FROM, now=now) == "invalid"
    assert check(TOKEN, sid(1), token, caller="+15550111", now=now) == "invalid"
    assert check("other-secret", sid(1), token, caller=FROM, now=now) == "invalid"
    assert check(TOKEN, sid(1), None, caller=FROM, now=now) == "missing"
    # an attacker cannot extend the expiry: it is under the MAC
    parts = token.split(".")
    later = ".".join([parts[0], str(int(parts[1]) + 3600), *parts[2:]])
    assert check(TOKEN, sid(1), later, caller=FROM, now=now + 61) == "invalid"
    # every webhook mints a different token (a nonce), all of them valid
    assert signature.stream_token(TOKEN, sid(1), caller=FROM, now=now) != token


async def test_replayed_token_is_refused_on_its_second_stream(live_server, phone_app):
    app, calls = phone_app
    token = signature.stream_token(TOKEN, sid(10), caller=FROM)
    with live_server(app) as (_http, ws_base):
        async with Stream(ws_base, sid(10), params_for(sid(10), token)) as first:
            await wait_until(lambda: len(calls) == 1, "the first stream to start")
            async with Stream(ws_base, sid(10), params_for(sid(10), token)) as replay:
                assert await replay.refusal() == (1008, "call already has a stream")
            assert first.closed is None and len(calls) == 1
        await wait_until(lambda: len(calls) == 0, "the first call to end")
        # after the call ended, neither the same token nor a fresh one opens another stream
        fresh = signature.stream_token(TOKEN, sid(10), caller=FROM)
        for again in (token, fresh):
            async with Stream(ws_base, sid(10), params_for(sid(10), again)) as replay:
                assert await replay.refusal() == (1008, "call already has a stream")
    assert calls.finished == 1


async def test_expired_token_is_refused(live_server, phone_app):
    app, calls = phone_app
    token = signature.stream_token(TOKEN, sid(11), caller=FROM, now=time.time() - 120)
    with live_server(app) as (_http, ws_base):
        async with Stream(ws_base, sid(11), params_for(sid(11), token)) as stream:
            assert await stream.refusal() == (1008, "stream token expired")
    assert calls.finished == 0


@pytest.mark.parametrize("presented", ["other_call", "other_caller"])
async def test_token_of_one_call_does_not_open_another(live_server, phone_app, presented):
    app, calls = phone_app
    token = signature.stream_token(TOKEN, sid(12), caller=FROM)
    call_sid, caller = (sid(13), FROM) if presented == "other_call" else (sid(12), "+15550111")
    with live_server(app) as (_http, ws_base):
        async with Stream(ws_base, call_sid, params_for(call_sid, token, caller)) as stream:
            assert await stream.refusal() == (1008, "stream token missing or invalid")
        # the refused stream did not use up the real call's stream
        async with Stream(ws_base, sid(12), params_for(sid(12), token)):
            await wait_until(lambda: len(calls) == 1, "the real call's stream to start")
    await wait_until(lambda: calls.finished == 1, "the call to end")


def test_phone_admission_claims_once_and_caps_calls():
    from diffvoice.voice.telephony.admission import PhoneAdmission, phone_call_limit

    clock = [1000.0]
    phones = PhoneAdmission(limit=2, retention_s=100, max_claims=3, clock=lambda: clock[0])
    assert phones.claim("CA1") and not phones.claim("CA1")
    clock[0] += 101  # past retention: forgotten (its token expired long before)
    assert phones.claim("CA1")
    assert phones.claim("CA2") and phones.claim("CA3") and phones.claim("CA4")  # CA1 evicted
    assert not phones.claim("CA4") and phones.claim("CA1")
    assert phones.acquire() and phones.acquire() and not phones.acquire()
    phones.release()
    assert phones.open_calls() == 1 and phones.acquire()
    assert phone_call_limit(SimpleNamespace(max_sessions=32)) == 16
    assert phone_call_limit(SimpleNamespace(max_sessions=1)) == 1
    assert phone_call_limit(SimpleNamespace(max_sessions=32, max_phone_calls=30)) == 30


def test_max_phone_calls_is_validated():
    from diffvoice.voice.config import ServeConfig

    assert ServeConfig(max_sessions=8).max_phone_calls is None
    assert ServeConfig(max_sessions=8, max_phone_calls=8).max_phone_calls == 8
    for bad in (0, 9, True):
        with pytest.raises(ValueError, match="max_phone_calls"):
            ServeConfig(max_sessions=8, max_phone_calls=bad)


@pytest.fixture
def capped_state(random_engine):
    from voice_fixtures import RANDOM_LLM, TINY_WHISPER

    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    config = ServeConfig(port=0, model="random-sdar", asr=str(TINY_WHISPER), stop_secs=0.4,
                         max_new_tokens=8, max_sessions=4, twilio_auth_token=TOKEN,
                         receptionist_tools="off")  # max_phone_calls: default, 4 // 2
    asr = resolve_asr(config.asr, "cpu", no_speech_threshold=None, max_new_tokens=8)
    return AppState.create(config, random_engine, asr=asr, llm_overrides=RANDOM_LLM)


@pytest.mark.timeout(scaled(180))
async def test_phone_streams_past_their_cap_are_refused_and_browsers_still_admitted(
        capped_state):
    from voice_fixtures import UvicornThread

    from diffvoice.voice.server import create_app
    from diffvoice.voice.transport import protocol

    calls = ActiveCalls()
    app = create_app(capped_state)
    app.include_router(make_router(capped_state, calls=calls, build_pipeline=passthrough))
    with UvicornThread(app, ws_max_size=1 << 20) as server:
        ws_base = f"ws://127.0.0.1:{server.port}"
        tokens = {n: signature.stream_token(TOKEN, sid(n), caller=FROM) for n in range(20, 24)}
        async with Stream(ws_base, sid(20), params_for(sid(20), tokens[20])), \
                Stream(ws_base, sid(21), params_for(sid(21), tokens[21])):
            await wait_until(lambda: len(calls) == 2, "two phone calls to start")
            for n in (22, 23):  # the phone cap (2 of max_sessions 4), not max_sessions
                async with Stream(ws_base, sid(n), params_for(sid(n), tokens[n])) as extra:
                    assert await extra.refusal() == (1013, "phone lines busy")
            # the webhook says the lines are busy instead of handing out another stream
            port = server.port
            form = {"CallSid": sid(24), "From": FROM, "To": "+15550199"}
            url = f"http://127.0.0.1:{port}/telephony/twilio/voice"
            status, body = await asyncio.to_thread(
                post, url, form, reference_signature(TOKEN, url, form))
            assert status == 200 and ET.fromstring(body).find("./Connect") is None, body
            # a browser caller is still admitted
            async with websockets.connect(server.ws_url, ping_interval=None) as browser:
                await browser.send(protocol.SessionStart(config={}).encode())
                first = protocol.decode_server(
                    await asyncio.wait_for(browser.recv(), scaled(60)))
                assert isinstance(first, protocol.SessionStarted), first
