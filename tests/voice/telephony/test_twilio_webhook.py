"""POST /telephony/twilio/voice and /status over a real loopback server.

Twilio's request is simulated with urllib; signatures come from this file's own implementation
of the documented algorithm (see test_twilio_signature.reference_signature).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from test_twilio_signature import reference_signature

from diffvoice.voice.telephony import signature, webhook_banner
from diffvoice.voice.telephony.twilio import make_router

TOKEN = "test-auth-token-0123456789"
PUBLIC = "https://agent.example.ngrok.app"
CALL = {
    "AccountSid": "AC" + "1" * 32,
    "CallSid": "CA" + "2" * 32,
    "From": "+15550100",
    "To": "+15550199",
    "CallStatus": "ringing",
    "Direction": "inbound",
}


def post(url: str, params: dict, sig: str | None) -> tuple[int, str]:
    body = urllib.parse.urlencode(params).encode()
    req = urllib.request.Request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/x-www-form-urlencoded")
    if sig is not None:
        req.add_header("X-Twilio-Signature", sig)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.fixture
def server(live_server, tmp_path):
    log = tmp_path / "latency.jsonl"
    config = SimpleNamespace(
        public_url=PUBLIC, twilio_auth_token=TOKEN, twilio_validate=True, latency_log=str(log)
    )
    app = FastAPI()
    app.include_router(make_router(SimpleNamespace(config=config, engine=None)))
    with live_server(app) as (http, _ws):
        yield http, log


def test_valid_signature_gets_stream_twiml(server):
    http, _ = server
    sig = reference_signature(TOKEN, PUBLIC + "/telephony/twilio/voice", CALL)
    status, body = post(http + "/telephony/twilio/voice", CALL, sig)
    assert status == 200, body
    root = ET.fromstring(body)
    stream = root.find("./Connect/Stream")
    assert stream is not None
    assert stream.get("url") == "wss://agent.example.ngrok.app/telephony/twilio/stream"
    params = {p.get("name"): p.get("value") for p in stream.findall("Parameter")}
    assert params["CallSid"] == CALL["CallSid"]
    assert params["From"] == CALL["From"] and params["To"] == CALL["To"]
    assert signature.stream_token_matches(TOKEN, CALL["CallSid"], params["token"],
                                          caller=CALL["From"])
    # bound to the caller: the same token with another From does not verify
    assert not signature.stream_token_matches(TOKEN, CALL["CallSid"], params["token"])


@pytest.mark.parametrize("case", ["tampered", "wrong_token", "missing", "other_url"])
def test_bad_signature_is_refused_and_logged(server, case, caplog):
    http, _ = server
    url = PUBLIC + "/telephony/twilio/voice"
    params, sig = dict(CALL), reference_signature(TOKEN, url, CALL)
    if case == "tampered":
        params["From"] = "+15550666"
    elif case == "wrong_token":
        sig = reference_signature(TOKEN + "x", url, CALL)
    elif case == "missing":
        sig = None
    elif case == "other_url":
        sig = reference_signature(TOKEN, "https://elsewhere.example/telephony/twilio/voice", CALL)
    with caplog.at_level(logging.WARNING, logger="diffvoice.voice.telephony.twilio"):
        status, body = post(http + "/telephony/twilio/voice", params, sig)
    assert status == 403
    assert "Stream" not in body
    assert any("403" in r.getMessage() for r in caplog.records)


def test_status_callback_is_logged_without_phone_numbers(server):
    http, log = server
    params = dict(CALL, CallStatus="completed", CallDuration="12")
    sig = reference_signature(TOKEN, PUBLIC + "/telephony/twilio/status", params)
    assert post(http + "/telephony/twilio/status", params, sig)[0] == 204
    assert post(http + "/telephony/twilio/status", params, None)[0] == 403
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(lines) == 1
    assert lines[0]["type"] == "twilio.status"
    assert lines[0]["CallSid"] == CALL["CallSid"] and lines[0]["CallStatus"] == "completed"
    assert CALL["From"] not in json.dumps(lines[0])


def test_validation_off_accepts_unsigned_and_warns(live_server, caplog):
    config = SimpleNamespace(public_url=None, twilio_auth_token=None, twilio_validate=False)
    app = FastAPI()
    with caplog.at_level(logging.WARNING, logger="diffvoice.voice.telephony.twilio"):
        app.include_router(make_router(SimpleNamespace(config=config, engine=None)))
    assert any("VALIDATION IS OFF" in r.getMessage() for r in caplog.records)
    assert "VALIDATION IS OFF" in webhook_banner(config)
    with live_server(app) as (http, _ws):
        status, body = post(http + "/telephony/twilio/voice", CALL, None)
    assert status == 200
    stream = ET.fromstring(body).find("./Connect/Stream")
    # No public URL: derived from the request's own host.
    assert stream.get("url").startswith("ws://127.0.0.1:")
    assert "token" not in {p.get("name") for p in stream.findall("Parameter")}


def test_banner_prints_public_webhook_url():
    config = SimpleNamespace(public_url=PUBLIC + "/", twilio_auth_token=TOKEN, twilio_validate=True)
    banner = webhook_banner(config)
    assert f"{PUBLIC}/telephony/twilio/voice" in banner
    assert "wss://agent.example.ngrok.app/telephony/twilio/stream" in banner
    assert "WARNING" not in banner


def test_full_server_answers_busy_instead_of_streaming(live_server):
    config = SimpleNamespace(
        public_url=PUBLIC, twilio_auth_token=TOKEN, twilio_validate=True, max_sessions=1
    )
    state = SimpleNamespace(config=config, engine=None, active_sessions={"browser-1"})
    app = FastAPI()
    app.include_router(make_router(state))
    sig = reference_signature(TOKEN, PUBLIC + "/telephony/twilio/voice", CALL)
    with live_server(app) as (http, _ws):
        status, body = post(http + "/telephony/twilio/voice", CALL, sig)
    root = ET.fromstring(body)
    assert status == 200
    assert root.find("./Connect") is None
    assert "busy" in root.find("./Say").text and root.find("./Hangup") is not None
