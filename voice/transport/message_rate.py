"""WebSocket messages per second from one peer: a flood of tiny or empty frames is closed.

The audio limit (voice.ingest_limit) counts seconds of audio, so empty binary frames, 2-byte
frames, pings and fragments cost it nothing while each costs the event loop a few turns (issue
54 N5: 29 000 empty frames a second held one call's turn 31 s; 1.7 M pings lagged the loop
5.9 s). This counts every message, whatever it carries.

Contract
--------
`MessageRate(rate, burst, save_s)`: `admit(n=1) -> bool` for every n messages received; False
once the peer is ahead of `rate` messages a second by more than `burst` messages, and from then
on (the socket is closed 1008 `message_rate`). What a peer may save by sending below the rate
is capped at `save_s` seconds of it, so a server stall (nothing read for up to `save_s` s, then
everything at once) is not the peer's fault, yet a flood after a quiet spell is still closed
after at most `(save_s * rate) + burst` messages. `rate=0` turns the limit off. `configure(rate,
burst)` changes the limits of a running count (the server's config, once the app has the
socket).

Where it is counted: `voice.transport.keepalive.KeepaliveWebSocketProtocol` (what `diffvoice
serve` runs) counts every frame, control frames and continuation fragments included, before the
app sees any, and publishes its counter in the ASGI scope (`SCOPE_KEY`). `limit_socket(ws,
config)` is called by each route after accept: with that counter present it sets it to the
config's `ws_message_rate` / `ws_message_burst` and returns None (the protocol enforces it);
under another WebSocket implementation (tests' plain uvicorn, a proxy) it returns a fresh
`MessageRate` that the route counts each message it receives with (pings are then invisible).

Knows nothing about pipecat, the wire protocol's JSON or Twilio.
"""

from __future__ import annotations

import time

SCOPE_KEY = "diffvoice.message_rate"
CLOSE_CODE = 1008
CLOSE_REASON = "message_rate"
DEFAULT_RATE = 200.0  # messages a second: 20 ms audio is 50, Twilio's media 50 plus marks
DEFAULT_BURST = 400  # messages beyond the rate at once (a network stall's backlog)
DEFAULT_SAVE_S = 30.0  # seconds of the rate a slow peer may save (a server stall's backlog)


def _check(rate, burst) -> None:
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate < 0:
        raise ValueError(f"rate must be a number >= 0 (0: off), got {rate!r}")
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
        raise ValueError(f"burst must be an integer >= 1, got {burst!r}")


class MessageRate:
    def __init__(self, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST,
                 save_s: float = DEFAULT_SAVE_S, clock=time.monotonic) -> None:
        _check(rate, burst)
        if not save_s >= 0:
            raise ValueError(f"save_s must be >= 0, got {save_s!r}")
        self.rate = float(rate)
        self.burst = burst
        self.save_s = float(save_s)
        self._clock = clock
        self._last = clock()
        self.ahead = 0.0  # messages beyond rate x elapsed time (< 0: saved)
        self.received = 0
        self.closed = False

    def configure(self, rate: float, burst: int) -> None:
        _check(rate, burst)
        self.rate, self.burst = float(rate), burst

    def admit(self, n: int = 1) -> bool:
        self.received += n
        if self.closed:
            return False
        if self.rate == 0:
            return True
        now = self._clock()
        elapsed, self._last = now - self._last, now
        self.ahead = max(-self.save_s * self.rate, self.ahead - elapsed * self.rate) + n
        if self.ahead > self.burst:
            self.closed = True
            return False
        return True

    def describe(self) -> str:
        return (f"more than {self.rate:g} WebSocket messages a second (+{self.burst} at once): "
                f"{self.received} received")


def limit_socket(websocket, config) -> MessageRate | None:
    """Apply `config`'s message rate to this accepted socket; see the module docstring."""
    rate = getattr(config, "ws_message_rate", DEFAULT_RATE)
    burst = getattr(config, "ws_message_burst", DEFAULT_BURST)
    scope = getattr(websocket, "scope", None) or {}
    counter = (scope.get("extensions") or {}).get(SCOPE_KEY)
    if isinstance(counter, MessageRate):
        counter.configure(rate, burst)
        return None
    return MessageRate(rate, burst) if rate else None
