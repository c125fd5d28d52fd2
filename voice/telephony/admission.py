"""Which Twilio Media Streams may run: one stream per call, and a cap on phone calls.

Contract
--------
:class:`PhoneAdmission` (one server process; `voice.scale.phone_calls` has the same interface
over shared memory for ``serve --workers N``):

- ``claim(call_sid, now=None) -> bool``: True for the first stream that presents ``call_sid``;
  False for every later one while the claim is remembered (``retention_s``: the stream token's
  lifetime plus the longest call, so a token can never be shown twice and a call never gets a
  second stream). Claims are never given back: a call whose stream ended does not get another.
  At most ``max_claims`` are kept; past that the oldest is forgotten first (only a CallSid whose
  claim is older than every other could then be claimed again, and only with a fresh token
  from a signed webhook).
- ``acquire() -> bool`` / ``release()``: a slot for one running phone call; False when
  ``limit`` calls already run (``limit`` None: no cap). ``open_calls()`` is how many run.

:func:`phone_call_limit(config)` is the cap a server applies: ``config.max_phone_calls`` when
set, else half of ``max_sessions`` (at least 1), so phone streams alone cannot fill
``max_sessions`` and lock browser callers out; None when the config has neither (tests' bare
configs). :func:`claim_retention_s(config)` is the token lifetime plus ``max_call_s``.

Single-threaded by design (the server's event loop). Knows nothing about sockets or Twilio's
wire format.
"""

from __future__ import annotations

import time
from collections import OrderedDict

from diffvoice.voice.telephony.signature import STREAM_TOKEN_TTL_S

MAX_CLAIMS = 65536  # CallSids remembered per process (about 100 bytes each)


def phone_call_limit(config) -> int | None:
    explicit = getattr(config, "max_phone_calls", None)
    if explicit is not None:
        return int(explicit)
    max_sessions = getattr(config, "max_sessions", None)
    return max(1, int(max_sessions) // 2) if max_sessions is not None else None


def claim_retention_s(config) -> float:
    return STREAM_TOKEN_TTL_S + float(getattr(config, "max_call_s", 3600.0))


class PhoneAdmission:
    def __init__(
        self,
        limit: int | None,
        retention_s: float = STREAM_TOKEN_TTL_S + 3600.0,
        max_claims: int = MAX_CLAIMS,
        clock=time.time,
    ) -> None:
        if limit is not None and (isinstance(limit, bool) or limit < 1):
            raise ValueError(f"limit must be >= 1 or None, got {limit!r}")
        if not retention_s > 0 or max_claims < 1:
            raise ValueError("retention_s must be > 0 and max_claims >= 1")
        self.limit = limit
        self.retention_s = float(retention_s)
        self.max_claims = max_claims
        self._clock = clock
        self._claims: OrderedDict[str, float] = OrderedDict()  # CallSid -> forget after (time)
        self._open = 0

    def claim(self, call_sid: str, now: float | None = None) -> bool:
        now = self._clock() if now is None else now
        while self._claims and next(iter(self._claims.values())) <= now:
            self._claims.popitem(last=False)  # insertion order is expiry order
        if call_sid in self._claims:
            return False
        while len(self._claims) >= self.max_claims:
            self._claims.popitem(last=False)
        self._claims[call_sid] = now + self.retention_s
        return True

    def acquire(self) -> bool:
        if self.limit is not None and self._open >= self.limit:
            return False
        self._open += 1
        return True

    def release(self) -> None:
        self._open = max(0, self._open - 1)

    def open_calls(self) -> int:
        return self._open
