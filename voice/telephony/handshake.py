"""The opening of a Twilio Media Stream, parsed without sockets.

Contract
--------
Twilio's documented order is ``connected`` then ``start``; only after ``start`` come ``media``,
``dtmf``, ``mark`` and finally ``stop``. :class:`StreamHandshake` is fed the raw WebSocket
messages one at a time until it returns a :class:`StreamStart`. Anything else raises
:class:`HandshakeError` carrying a WebSocket close code and a short reason (< 123 bytes, the
protocol's limit), so the server can close that one stream and leave every other call alone:

- not text, not JSON, or not a JSON object with a string ``event`` -> 1007 (invalid payload)
- an event other than ``connected``/``start`` first, or ``connected`` twice -> 1008 (policy)
- ``start`` without ``streamSid``/``callSid``, or ``customParameters`` not a string map -> 1007
- a media format other than mono 8 kHz mu-law -> 1003 (unsupported data)

``connected`` may be skipped (some Twilio-compatible providers open with ``start``).
This module knows nothing about pipecat, FastAPI or signatures.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from diffvoice.voice.json_input import JSONInputError, loads_untrusted

CLOSE_UNSUPPORTED = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY = 1008

EXPECTED_ENCODING = "audio/x-mulaw"
EXPECTED_SAMPLE_RATE = 8000
EXPECTED_CHANNELS = 1


class HandshakeError(ValueError):
    """The stream did not open the way Twilio's protocol says it must."""

    def __init__(self, code: int, reason: str):
        # WebSocket close reasons are limited to 123 bytes of UTF-8.
        self.code = code
        self.reason = reason.encode("utf-8")[:120].decode("utf-8", "ignore")
        super().__init__(f"{code}: {self.reason}")


@dataclass(frozen=True)
class StreamStart:
    """What the ``start`` message told us about the call."""

    stream_sid: str
    call_sid: str
    account_sid: str | None = None
    custom_parameters: dict[str, str] = field(default_factory=dict)
    encoding: str = EXPECTED_ENCODING
    sample_rate: int = EXPECTED_SAMPLE_RATE
    channels: int = EXPECTED_CHANNELS
    tracks: tuple[str, ...] = ()
    protocol_version: str | None = None

    def __post_init__(self):
        if not self.stream_sid:
            raise ValueError("stream_sid must be non-empty")
        if not self.call_sid:
            raise ValueError("call_sid must be non-empty")


def _decode(message: str | bytes) -> dict:
    if isinstance(message, bytes):
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "expected a JSON text message, got binary")
    try:
        obj = loads_untrusted(message)
    except JSONInputError as e:  # not JSON, huge ints, deep nesting, lone surrogates
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, f"message is not valid JSON: {e}") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("event"), str):
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "message is not an object with an 'event'")
    return obj


def _non_empty_str(obj: dict, key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str) or not value:
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, f"{where} lacks a string '{key}'")
    return value


def parse_start(message: dict, protocol_version: str | None = None) -> StreamStart:
    """Validate a decoded ``start`` message and return what it says."""
    start = message.get("start")
    if not isinstance(start, dict):
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "start message lacks a 'start' object")
    stream_sid = _non_empty_str(start, "streamSid", "start")
    outer_sid = message.get("streamSid")
    if outer_sid is not None and outer_sid != stream_sid:
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "streamSid differs inside and outside start")
    call_sid = _non_empty_str(start, "callSid", "start")
    account_sid = start.get("accountSid") if isinstance(start.get("accountSid"), str) else None

    custom = start.get("customParameters", {})
    if custom is None:
        custom = {}
    if not isinstance(custom, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in custom.items()
    ):
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "customParameters must map strings to strings")

    media_format = start.get("mediaFormat")
    if not isinstance(media_format, dict):
        raise HandshakeError(CLOSE_INVALID_PAYLOAD, "start lacks a 'mediaFormat' object")
    encoding = media_format.get("encoding")
    sample_rate = media_format.get("sampleRate")
    channels = media_format.get("channels")
    if (encoding, sample_rate, channels) != (
        EXPECTED_ENCODING,
        EXPECTED_SAMPLE_RATE,
        EXPECTED_CHANNELS,
    ):
        raise HandshakeError(
            CLOSE_UNSUPPORTED,
            f"unsupported mediaFormat {encoding}/{sample_rate}/{channels}; "
            f"need {EXPECTED_ENCODING}/{EXPECTED_SAMPLE_RATE}/{EXPECTED_CHANNELS}",
        )
    tracks = start.get("tracks", [])
    tracks = tuple(t for t in tracks if isinstance(t, str)) if isinstance(tracks, list) else ()
    return StreamStart(
        stream_sid=stream_sid,
        call_sid=call_sid,
        account_sid=account_sid,
        custom_parameters=dict(custom),
        encoding=encoding,
        sample_rate=sample_rate,
        channels=channels,
        tracks=tracks,
        protocol_version=protocol_version,
    )


class StreamHandshake:
    """Feed messages until :meth:`feed` returns the :class:`StreamStart`."""

    def __init__(self):
        self._connected_version: str | None = None
        self._seen_connected = False
        self.result: StreamStart | None = None

    def feed(self, message: str | bytes) -> StreamStart | None:
        if self.result is not None:
            raise RuntimeError("handshake already complete")
        obj = _decode(message)
        event = obj["event"]
        if event == "connected":
            if self._seen_connected:
                raise HandshakeError(CLOSE_POLICY, "'connected' sent twice")
            self._seen_connected = True
            version = obj.get("version")
            self._connected_version = version if isinstance(version, str) else None
            return None
        if event == "start":
            self.result = parse_start(obj, self._connected_version)
            return self.result
        expected = "'start'" if self._seen_connected else "'connected' or 'start'"
        raise HandshakeError(CLOSE_POLICY, f"expected {expected}, got {event[:40]!r}")
