"""`SessionLimits`: the fields of ServeConfig that keep one client from hurting the others.

Per-call limits (idle timeout, longest call, per-IP sessions, handshake timeout), request body
caps, the /ws Origin allow-list, malloc tuning, /metrics exposure, WebSocket keepalive and the
event-loop stall log (issue 12). A frozen dataclass base of voice.config.ServeConfig, which
calls `_check_limits()` from its `__post_init__`; every field is a `diffvoice serve` flag
(`--idle-timeout-s` -> `idle_timeout_s`) like ServeConfig's own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _help(text: str, **extra: Any) -> dict[str, Any]:
    return {"help": text, **extra}


def _split_csv(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


@dataclass(frozen=True)
class SessionLimits:
    idle_timeout_s: float = field(
        default=30.0,
        metadata=_help("close a call after this many seconds without caller audio (idle_timeout)"),
    )
    max_call_s: float = field(
        default=3600.0, metadata=_help("close a call after this many seconds (max_duration)")
    )
    max_sessions_per_ip: int = field(
        default=8, metadata=_help("concurrent /ws sessions one client IP may hold; more get 1013")
    )
    handshake_timeout_s: float = field(
        default=10.0,
        metadata=_help(
            "seconds a new /ws or Twilio stream socket may take to send its first message "
            "(/ws) or 'start' (Twilio) before it is closed"
        ),
    )
    max_body_bytes: int = field(
        default=1 << 20, metadata=_help("largest HTTP request body (e.g. /v1); larger get 413")
    )
    max_form_bytes: int = field(
        default=64 << 10, metadata=_help("largest Twilio webhook form body; larger get 413")
    )
    allowed_origins: tuple[str, ...] = field(
        default=(),
        metadata=_help(
            "comma-separated extra Origins allowed to open /ws and, without --api-keys, to call "
            "/v1 from a browser (always allowed: http(s)://localhost / 127.0.0.1 / [::1] on any "
            "port and this server's own --host:--port and --public-url; the Host header is not "
            "trusted, so a page served under another name, e.g. --host 0.0.0.0 reached as "
            "http://box.lan:8000 or behind a proxy, needs its origin here; '*' allows any)"
        ),
    )
    malloc_arena_max: int = field(
        default=4,
        metadata=_help("glibc malloc arenas (MALLOC_ARENA_MAX); freed memory is also trimmed "
                       "back to the OS when calls end. 0 leaves glibc's defaults"),
    )
    switch_interval_ms: float = field(
        default=1.0,
        metadata=_help("the server process's interpreter switch interval (sys.setswitchinterval): "
                       "how long the VAD, ASR, TTS and engine threads wait at most for the "
                       "interpreter lock while the event loop is busy. 0 keeps Python's 5 ms"),
    )
    public_metrics: bool = field(
        default=False,
        metadata=_help("with --api-keys, still serve /metrics and the full /healthz without a key"),
    )

    # --- caller audio at the speed of speech (voice.ingest_limit) ---
    audio_rate_limit: float = field(
        default=1.5,
        metadata=_help("caller audio (/ws and Twilio) accepted at most this many times real "
                       "time, plus --audio-burst-s; past that frames are refused and, once the "
                       "caller has sent more than this rate plus twice --audio-burst-s, the call "
                       "is closed (1008 audio_too_fast). Audio sent in real time but delivered "
                       "late in one burst is refused past the burst, never closed. 0: no limit"),
    )
    audio_burst_s: float = field(
        default=2.0,
        metadata=_help("seconds of caller audio a call may send beyond --audio-rate-limit at "
                       "once (e.g. after a network stall); twice this beyond the rate closes it"),
    )

    # --- slow HTTP clients (voice.http_limits: uvicorn's settings) ---
    header_timeout_s: float = field(
        default=10.0,
        metadata=_help("seconds a client has, from connecting (or from its next request's first "
                       "byte on a kept-alive connection), to send a whole request line and "
                       "headers (also a WebSocket upgrade's); slower ones are disconnected"),
    )
    keep_alive_timeout_s: float = field(
        default=5.0,
        metadata=_help("close an idle kept-alive HTTP connection after this many seconds"),
    )
    connection_headroom: int = field(
        default=128,
        metadata=_help("open connections per server process beyond --max-sessions (API "
                       "clients, page loads); past max_sessions + this, new HTTP requests get "
                       "503 at once (uvicorn limit_concurrency)"),
    )

    # --- WebSocket keepalive (voice.transport.keepalive) ---
    ws_ping_interval_s: float = field(
        default=20.0,
        metadata=_help("seconds between the server's WebSocket keepalive pings on /ws and "
                       "Twilio streams (keeps proxies and NATs from dropping quiet calls); "
                       "0 sends none"),
    )
    ws_ping_timeout_s: float = field(
        default=20.0,
        metadata=_help("close a WebSocket (1008 keepalive_timeout) when nothing at all, pong or "
                       "data, came from the peer this many seconds after a ping; a peer that "
                       "keeps sending is never closed for a late pong. 0: never"),
    )
    # --- message floods (voice.transport.message_rate, issue 54 N5) ---
    ws_message_rate: float = field(
        default=200.0,
        metadata=_help("WebSocket messages a second one /ws or Twilio stream peer may send, "
                       "every frame counted (audio, text, empty frames, pings, fragments); "
                       "past it plus --ws-message-burst the socket is closed 1008 message_rate. "
                       "0: no limit"),
    )
    ws_message_burst: int = field(
        default=400,
        metadata=_help("WebSocket messages a peer may send beyond --ws-message-rate at once "
                       "(e.g. after a network stall)"),
    )

    # --- who may hold the sessions (issue 54 N6, Twilio streams before 'start') ---
    max_browser_sessions: int | None = field(
        default=None,
        metadata=_help("concurrent /ws browser sessions; more get 1013 overloaded. Default: "
                       "--max-sessions less the phone share (--max-phone-calls, else half) "
                       "when Twilio is configured (an auth token, or --no-twilio-validate), so "
                       "browser callers cannot lock phone callers out; else --max-sessions"),
    )
    max_pending_streams: int = field(
        default=32,
        metadata=_help("Twilio stream sockets that have not sent 'start' yet, all clients "
                       "together; more are closed at once (1013)"),
    )
    max_pending_streams_per_ip: int = field(
        default=8,
        metadata=_help("Twilio stream sockets one client IP may hold before 'start'; more are "
                       "closed at once (1013)"),
    )

    loop_stall_log_ms: float = field(
        default=0.0,
        metadata=_help("diagnostics: log the stack that held the event loop whenever it is "
                       "this many ms late (voice.loop_watchdog); 0: off"),
    )

    def _check_limits(self) -> None:
        for name in ("idle_timeout_s", "max_call_s", "handshake_timeout_s", "header_timeout_s",
                     "keep_alive_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"{name} must be a number > 0, got {value!r}")
        if isinstance(self.malloc_arena_max, bool) or not isinstance(self.malloc_arena_max, int) \
                or self.malloc_arena_max < 0:
            raise ValueError(f"malloc_arena_max must be an integer >= 0, got "
                             f"{self.malloc_arena_max!r}")
        for name in ("max_sessions_per_ip", "max_body_bytes", "max_form_bytes",
                     "connection_headroom", "ws_message_burst", "max_pending_streams",
                     "max_pending_streams_per_ip"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        browsers = self.max_browser_sessions
        if browsers is not None and (isinstance(browsers, bool) or not isinstance(browsers, int)
                                     or browsers < 1):
            raise ValueError(f"max_browser_sessions must be an integer >= 1 or unset, "
                             f"got {browsers!r}")
        for name in ("ws_ping_interval_s", "ws_ping_timeout_s", "loop_stall_log_ms",
                     "switch_interval_ms", "ws_message_rate"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"{name} must be a number >= 0 (0: off), got {value!r}")
        rate = self.audio_rate_limit
        if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not (
                rate == 0 or rate >= 1):
            raise ValueError(f"audio_rate_limit must be 0 (off) or >= 1 (x real time), "
                             f"got {rate!r}")
        if isinstance(self.audio_burst_s, bool) or not isinstance(
                self.audio_burst_s, (int, float)) or not self.audio_burst_s > 0:
            raise ValueError(f"audio_burst_s must be a number > 0, got {self.audio_burst_s!r}")
        if isinstance(self.allowed_origins, str):
            object.__setattr__(self, "allowed_origins", _split_csv(self.allowed_origins))
        for origin in self.allowed_origins:
            if origin != "*" and not origin.startswith(("http://", "https://")):
                raise ValueError(
                    f"allowed_origins entries must be '*' or start with http(s)://, got {origin!r}"
                )
