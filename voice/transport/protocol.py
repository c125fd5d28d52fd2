"""Browser wire protocol, sans-I/O: pure dataclasses with `encode()` / `decode_*()`.

Contract (documented for page authors in docs/protocol.md):

* Binary WebSocket frames carry 16-bit little-endian mono PCM. Client -> server at
  `INPUT_SAMPLE_RATE` (16 kHz); server -> client at the `output_sample_rate` announced in
  `session.started`.
* Text frames are JSON objects with a "type" field.
  client -> server: `session.start` (optional, first message only), `ping`.
  server -> client: `session.started`, `transcript`, `bot.text`, `bot.started_speaking`,
  `bot.stopped_speaking`, `playback.flush`, `latency`, `error`, `pong`.
* Malformed input raises `ProtocolError(code, message, close_code)`; the server sends the
  matching `error` event and closes *that* session with `close_code` (1003 unsupported data,
  1007 invalid payload, 1008 policy violation).

This module knows nothing about sockets, asyncio, pipecat or the engine: it turns bytes/str into
events and events into str, and is tested without any I/O. Both sides use it: the server decodes
client messages and encodes server events; test clients and the latency bench decode server
events with `decode_server`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, ClassVar

from diffvoice.voice.json_input import JSONInputError, loads_untrusted

PROTOCOL_VERSION = 1
INPUT_SAMPLE_RATE = 16000
SAMPLE_WIDTH = 2  # bytes per sample, int16 little-endian
MAX_AUDIO_FRAME_BYTES = 64 * 1024  # ~2 s at 16 kHz; the page sends 20-100 ms frames
MAX_TEXT_FRAME_CHARS = 16 * 1024
STOP_SECS_RANGE = (0.05, 5.0)

# WebSocket close codes (RFC 6455 section 7.4.1)
CLOSE_NORMAL = 1000
CLOSE_UNSUPPORTED_DATA = 1003
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_POLICY_VIOLATION = 1008
CLOSE_INTERNAL_ERROR = 1011
CLOSE_TRY_AGAIN_LATER = 1013

# error codes -> close code. "overloaded" and "internal" are raised by the server, not the codec.
ERROR_CLOSE_CODES: dict[str, int] = {
    "bad_json": CLOSE_INVALID_PAYLOAD,  # text frame is not valid JSON
    "not_an_object": CLOSE_INVALID_PAYLOAD,  # JSON but not an object
    "missing_type": CLOSE_INVALID_PAYLOAD,  # object without a string "type"
    "unknown_type": CLOSE_UNSUPPORTED_DATA,  # a type this server does not accept
    "bad_field": CLOSE_INVALID_PAYLOAD,  # a field has the wrong type or an out-of-range value
    "odd_pcm": CLOSE_INVALID_PAYLOAD,  # binary frame with an odd number of bytes
    "frame_too_large": CLOSE_POLICY_VIOLATION,  # binary or text frame above the limits
    "late_session_start": CLOSE_POLICY_VIOLATION,  # session.start after audio or twice
    "overloaded": CLOSE_TRY_AGAIN_LATER,  # server at capacity
    "too_many_sessions": CLOSE_TRY_AGAIN_LATER,  # this client IP holds max_sessions_per_ip
    "origin_not_allowed": CLOSE_POLICY_VIOLATION,  # a browser page from a foreign Origin
    "unauthorized": CLOSE_POLICY_VIOLATION,  # --api-keys set and no valid key or token
    "handshake_timeout": CLOSE_POLICY_VIOLATION,  # no first message within handshake_timeout_s
    "idle_timeout": CLOSE_POLICY_VIOLATION,  # no caller audio for idle_timeout_s
    "max_duration": CLOSE_POLICY_VIOLATION,  # the call reached max_call_s
    "audio_too_fast": CLOSE_POLICY_VIOLATION,  # caller audio beyond audio_rate_limit + burst
    "message_rate": CLOSE_POLICY_VIOLATION,  # messages beyond ws_message_rate + burst
    "output_stalled": CLOSE_TRY_AGAIN_LATER,  # the call's audio output could not be written
    "internal": CLOSE_INTERNAL_ERROR,  # server bug; the session cannot continue
    "model_not_found": CLOSE_POLICY_VIOLATION,  # /v1/realtime?model= names no served model
}


class ProtocolError(ValueError):
    """A client message that ends its session: send `Error(code, message)`, close `close_code`."""

    def __init__(self, code: str, message: str) -> None:
        if code not in ERROR_CLOSE_CODES:
            raise ValueError(f"unknown protocol error code {code!r}")
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.close_code = ERROR_CLOSE_CODES[code]

    def to_event(self) -> Error:
        return Error(code=self.code, message=self.message)


# ----------------------------------------------------------------------------- events


@dataclass(frozen=True)
class Event:
    """Base of every JSON event; `TYPE` is the wire "type"."""

    TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.TYPE, **asdict(self)}

    def encode(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), allow_nan=False)


# client -> server


@dataclass(frozen=True)
class SessionStart(Event):
    """Optional first message. `config` holds per-session overrides; known keys: stop_secs,
    turn_window_secs, eager_drafts."""

    TYPE: ClassVar[str] = "session.start"
    config: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Ping(Event):
    TYPE: ClassVar[str] = "ping"


@dataclass(frozen=True)
class AudioIn:
    """One binary frame of caller audio: int16 LE mono PCM at INPUT_SAMPLE_RATE."""

    pcm: bytes

    def encode(self) -> bytes:
        return self.pcm

    @property
    def num_samples(self) -> int:
        return len(self.pcm) // SAMPLE_WIDTH


# server -> client


@dataclass(frozen=True)
class SessionStarted(Event):
    TYPE: ClassVar[str] = "session.started"
    session_id: str
    input_sample_rate: int
    output_sample_rate: int
    stop_secs: float
    model: str
    asr: str
    tts: str
    warnings: list[str] = field(default_factory=list)
    protocol_version: int = PROTOCOL_VERSION
    replica: str | None = None  # the serving replica's id when scaled out (voice.scale)


@dataclass(frozen=True)
class Transcript(Event):
    """What the caller said. `final=False` are interim hypotheses (ASR-dependent)."""

    TYPE: ClassVar[str] = "transcript"
    text: str
    final: bool


@dataclass(frozen=True)
class BotText(Event):
    """A delta of the bot's answer text (append to the current bot message)."""

    TYPE: ClassVar[str] = "bot.text"
    text: str


@dataclass(frozen=True)
class BotStartedSpeaking(Event):
    TYPE: ClassVar[str] = "bot.started_speaking"


@dataclass(frozen=True)
class BotStoppedSpeaking(Event):
    TYPE: ClassVar[str] = "bot.stopped_speaking"


@dataclass(frozen=True)
class PlaybackFlush(Event):
    """The caller barged in: drop every queued bot sample now."""

    TYPE: ClassVar[str] = "playback.flush"


LATENCY_TIMESTAMPS = (
    "vad_stop_t",
    "transcript_final_t",
    "llm_first_text_t",
    "tts_first_audio_t",
    "first_audio_sent_t",
)
LATENCY_DURATIONS_MS = (
    "endpointing_ms",
    "asr_ms",
    "llm_ttft_ms",
    "tts_first_audio_ms",
    "server_ms",
)


@dataclass(frozen=True)
class Latency(Event):
    """One per bot turn. Timestamps are time.time() epoch seconds on the server clock; a stage
    that did not happen (e.g. the turn was interrupted before audio) is None.

    endpointing_ms:     end of user speech (the VAD's last speech window, speech_end_t) -> end of
                        the user turn (turn_end_t); measured per turn
    asr_ms:             VAD stop -> final transcript
    llm_ttft_ms:        final transcript -> first LLM text
    tts_first_audio_ms: first LLM text -> first TTS audio
    server_ms:          VAD stop -> first audio frame written to the socket
    """

    TYPE: ClassVar[str] = "latency"
    turn: int
    session_id: str
    stop_secs: float
    vad_stop_t: float | None = None
    transcript_final_t: float | None = None
    llm_first_text_t: float | None = None
    tts_first_audio_t: float | None = None
    first_audio_sent_t: float | None = None
    endpointing_ms: float | None = None
    asr_ms: float | None = None
    llm_ttft_ms: float | None = None
    tts_first_audio_ms: float | None = None
    server_ms: float | None = None
    interrupted: bool = False
    user_text: str = ""
    bot_text: str = ""
    speech_end_t: float | None = None    # caller's end of speech as the VAD heard it
    turn_end_t: float | None = None      # the user turn ended (answer may start)
    draft_hit: bool | None = None        # answer streamed from an eager draft (None: drafts off)
    drafts: int | None = None            # drafts started during this user turn
    extra_passes: int | None = None      # engine passes of drafts thrown away this turn
    answer_passes: int | None = None     # engine passes of the answer itself
    answer_ready: bool | None = None     # the draft had text when the turn ended (drafts on)
    draft_lead_ms: float | None = None   # the answering draft started this long before the turn
                                         # ended (negative: after); None: no draft answered
    user_turn_ends: int | None = None    # user turns ended since the previous answer began
    tool_calls: int = 0                  # tool calls made before the spoken outcome
    reprompt: bool = False               # no answer: the caller's speech gave no words and
                                         # they were asked to say it again (voice.turn_end)
    replica: str | None = None  # the serving replica's id when scaled out (voice.scale)


@dataclass(frozen=True)
class Error(Event):
    TYPE: ClassVar[str] = "error"
    code: str
    message: str


@dataclass(frozen=True)
class Pong(Event):
    TYPE: ClassVar[str] = "pong"


CLIENT_EVENTS: dict[str, type[Event]] = {e.TYPE: e for e in (SessionStart, Ping)}
SERVER_EVENTS: dict[str, type[Event]] = {
    e.TYPE: e
    for e in (
        SessionStarted,
        Transcript,
        BotText,
        BotStartedSpeaking,
        BotStoppedSpeaking,
        PlaybackFlush,
        Latency,
        Error,
        Pong,
    )
}

ClientMessage = SessionStart | Ping | AudioIn


# ----------------------------------------------------------------------------- decoding


def _check_stop_secs(value: Any) -> float:
    lo, hi = STOP_SECS_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError("bad_field", f"config.stop_secs must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ProtocolError("bad_field", f"config.stop_secs must be in [{lo}, {hi}], got {value}")
    return float(value)


def _check_turn_window_secs(value: Any) -> float:
    lo, hi = STOP_SECS_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError("bad_field", f"config.turn_window_secs must be a number, got {value!r}")
    if not lo <= value <= hi:
        raise ProtocolError(
            "bad_field", f"config.turn_window_secs must be in [{lo}, {hi}], got {value}")
    return float(value)


def _check_bool(name: str):
    def check(value: Any) -> bool:
        if not isinstance(value, bool):
            raise ProtocolError("bad_field", f"config.{name} must be true or false, got {value!r}")
        return value

    return check


# per-key validators for session.start config overrides
SESSION_CONFIG_KEYS = {
    "stop_secs": _check_stop_secs,
    "turn_window_secs": _check_turn_window_secs,
    "eager_drafts": _check_bool("eager_drafts"),
}


def _parse_object(text: str) -> dict[str, Any]:
    if len(text) > MAX_TEXT_FRAME_CHARS:
        raise ProtocolError(
            "frame_too_large", f"text frame of {len(text)} chars > {MAX_TEXT_FRAME_CHARS}"
        )
    try:
        obj = loads_untrusted(text)
    except JSONInputError as e:  # not JSON, huge ints, deep nesting, lone surrogates
        raise ProtocolError("bad_json", f"text frame is not usable JSON: {e}") from None
    if not isinstance(obj, dict):
        raise ProtocolError("not_an_object", f"expected a JSON object, got {type(obj).__name__}")
    if not isinstance(obj.get("type"), str):
        raise ProtocolError("missing_type", 'JSON object needs a string "type"')
    return obj


def decode_audio(data: bytes) -> AudioIn:
    if len(data) > MAX_AUDIO_FRAME_BYTES:
        raise ProtocolError(
            "frame_too_large", f"audio frame of {len(data)} B > {MAX_AUDIO_FRAME_BYTES} B"
        )
    if len(data) % SAMPLE_WIDTH:
        raise ProtocolError("odd_pcm", f"audio frame of {len(data)} B is not whole int16 samples")
    return AudioIn(pcm=bytes(data))


def decode_client(message: str | bytes) -> ClientMessage:
    """Decode one client WebSocket message (str = text frame, bytes = binary frame).

    Returns SessionStart (config validated; unknown keys are kept so the server can warn),
    Ping, or AudioIn. Raises ProtocolError for anything else.
    """
    if isinstance(message, (bytes, bytearray, memoryview)):
        return decode_audio(bytes(message))
    obj = _parse_object(message)
    kind = obj["type"]
    if kind == Ping.TYPE:
        return Ping()
    if kind == SessionStart.TYPE:
        config = obj.get("config", {})
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise ProtocolError("bad_field", "session.start config must be an object")
        checked = dict(config)
        for key, check in SESSION_CONFIG_KEYS.items():
            if key in checked:
                checked[key] = check(checked[key])
        return SessionStart(config=checked)
    raise ProtocolError("unknown_type", f"unknown client message type {kind!r}")


def decode_server(text: str) -> Event:
    """Decode one server text frame into its event dataclass (for clients and tests).

    Unknown fields are ignored (forward compatible); a missing required field is a ValueError.
    """
    obj = _parse_object(text)
    cls = SERVER_EVENTS.get(obj["type"])
    if cls is None:
        raise ProtocolError("unknown_type", f"unknown server event type {obj['type']!r}")
    names = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in obj.items() if k in names})
    except TypeError as e:
        raise ProtocolError("bad_field", f"{obj['type']}: {e}") from None


def session_config_warnings(start: SessionStart) -> list[str]:
    """Human-readable warnings for override keys this server ignores."""
    unknown = sorted(set(start.config) - set(SESSION_CONFIG_KEYS))
    return [f"session.start config key {k!r} is not supported and was ignored" for k in unknown]
