"""Media Stream opening messages, parsed without sockets."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from diffvoice.voice.telephony.handshake import (
    CLOSE_INVALID_PAYLOAD,
    CLOSE_POLICY,
    CLOSE_UNSUPPORTED,
    HandshakeError,
    StreamHandshake,
)
from diffvoice.voice.telephony.twiml import connect_stream

CONNECTED = json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"})


def start_message(**overrides) -> dict:
    start = {
        "accountSid": "AC" + "1" * 32,
        "streamSid": "MZ" + "3" * 32,
        "callSid": "CA" + "2" * 32,
        "tracks": ["inbound"],
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
        "customParameters": {"CallSid": "CA" + "2" * 32, "token": "t"},
    }
    start.update(overrides)
    return {
        "event": "start",
        "sequenceNumber": "1",
        "start": start,
        "streamSid": start["streamSid"],
    }


def test_documented_opening_is_parsed():
    hs = StreamHandshake()
    assert hs.feed(CONNECTED) is None
    result = hs.feed(json.dumps(start_message()))
    assert result.stream_sid == "MZ" + "3" * 32 and result.call_sid == "CA" + "2" * 32
    assert result.custom_parameters["token"] == "t"
    assert result.protocol_version == "1.0.0" and result.tracks == ("inbound",)


def test_start_without_connected_is_accepted():
    assert StreamHandshake().feed(json.dumps(start_message())).call_sid.startswith("CA")


@pytest.mark.parametrize(
    ("messages", "code", "words"),
    [
        ([b"\x00\x01"], CLOSE_INVALID_PAYLOAD, "binary"),
        (["not json"], CLOSE_INVALID_PAYLOAD, "JSON"),
        (["[1, 2]"], CLOSE_INVALID_PAYLOAD, "event"),
        ([json.dumps({"event": "media", "media": {"payload": ""}})], CLOSE_POLICY, "media"),
        ([CONNECTED, CONNECTED], CLOSE_POLICY, "twice"),
        ([CONNECTED, json.dumps({"event": "stop"})], CLOSE_POLICY, "'start'"),
        ([json.dumps(start_message(callSid=""))], CLOSE_INVALID_PAYLOAD, "callSid"),
        ([json.dumps({"event": "start"})], CLOSE_INVALID_PAYLOAD, "start"),
        ([json.dumps(start_message(customParameters={"a": 1}))], CLOSE_INVALID_PAYLOAD, "custom"),
        (
            [
                json.dumps(
                    start_message(
                        mediaFormat={"encoding": "audio/x-alaw", "sampleRate": 8000, "channels": 1}
                    )
                )
            ],
            CLOSE_UNSUPPORTED,
            "mediaFormat",
        ),  # fmt: skip
    ],
)
def test_bad_openings_name_a_close_code_and_reason(messages, code, words):
    hs = StreamHandshake()
    with pytest.raises(HandshakeError) as info:
        for message in messages:
            hs.feed(message)
    assert info.value.code == code
    assert words in info.value.reason
    assert len(info.value.reason.encode()) <= 123


def test_reason_is_truncated_to_websocket_limit():
    err = HandshakeError(CLOSE_POLICY, "é" * 200)
    assert len(err.reason.encode()) <= 123


def test_twiml_escapes_and_limits_parameters():
    xml = connect_stream("wss://h/s", {"From": "a\"<&>'", "To": "+1"})
    params = ET.fromstring(xml).findall("./Connect/Stream/Parameter")
    assert [(p.get("name"), p.get("value")) for p in params] == [("From", "a\"<&>'"), ("To", "+1")]
    with pytest.raises(ValueError):
        connect_stream("wss://h/s", {"x": "y" * 600})
    with pytest.raises(ValueError):
        connect_stream("https://h/s", {})
