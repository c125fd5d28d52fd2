"""Who may open a /ws call and read /metrics: Origin allow-list, API keys, short-lived tokens.

Contract:
- `origin_allowed(origin, host, allowed)`: a browser always sends `Origin` on a WebSocket
  upgrade, so a page on another site can be told apart. Allowed: no Origin at all (not a
  browser: curl, websockets, pipecat clients), the page's own origin (`Origin` host == the
  request's `Host`), http(s)://localhost / 127.0.0.1 / [::1] on any port, every entry of
  `allowed` (exact origins, or "*" for any).
- `key_matches(token, api_keys)`: constant-time comparison against every key.
- `SessionTokens(secret, ttl_s)`: `issue() -> (token, expires_at)` and `valid(token)`. A token
  is `<expiry>.<hmac-sha256(secret, expiry)>`, good for `ttl_s` seconds (default 300) and only
  on this server process (the secret is random per process unless given). With `--api-keys`,
  `POST /session-token` (bearer-authenticated) hands one out; a browser page passes it as
  `/ws?token=...` because browsers cannot set headers on a WebSocket.
- `ws_credential_ok(headers, query, api_keys, tokens)`: with api_keys set, /ws needs
  `Authorization: Bearer <key>`, `?token=<session token>` or `?api_key=<key>`.

Knows nothing about FastAPI routes or sessions.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
SESSION_TOKEN_TTL_S = 300.0


def origin_allowed(origin: str | None, host: str | None, allowed: Iterable[str]) -> bool:
    if origin is None:
        return True
    allowed = tuple(allowed)
    if "*" in allowed or origin.rstrip("/") in {a.rstrip("/") for a in allowed}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    if host and parts.netloc.lower() == host.lower():
        return True
    return (parts.hostname or "").lower() in LOCAL_HOSTS


def key_matches(token: str, api_keys: Iterable[str]) -> bool:
    token_b = token.encode("utf-8", "replace")
    matched = [hmac.compare_digest(token_b, key.encode()) for key in api_keys]
    return any(matched)


def bearer_token(headers: Mapping[str, str]) -> str | None:
    scheme, _, token = (headers.get("authorization") or "").partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class SessionTokens:
    def __init__(self, secret: bytes | None = None, ttl_s: float = SESSION_TOKEN_TTL_S) -> None:
        if ttl_s <= 0:
            raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
        self._secret = secret or secrets.token_bytes(32)
        self.ttl_s = ttl_s

    def _mac(self, expiry: str) -> str:
        return hmac.new(self._secret, expiry.encode(), hashlib.sha256).hexdigest()

    def issue(self, now: float | None = None) -> tuple[str, float]:
        expires_at = int((time.time() if now is None else now) + self.ttl_s)
        expiry = str(expires_at)
        return f"{expiry}.{self._mac(expiry)}", float(expires_at)

    def valid(self, token: str | None, now: float | None = None) -> bool:
        if not token or len(token) > 200:
            return False
        expiry, _, mac = token.partition(".")
        if not expiry.isdigit() or len(expiry) > 12:
            return False
        if not hmac.compare_digest(mac.encode("utf-8", "replace"), self._mac(expiry).encode()):
            return False
        return (time.time() if now is None else now) < int(expiry)


def ws_credential_ok(headers: Mapping[str, str], query: Mapping[str, str],
                     api_keys: tuple[str, ...], tokens: SessionTokens) -> bool:
    if not api_keys:
        return True
    bearer = bearer_token(headers)
    if bearer is not None and key_matches(bearer, api_keys):
        return True
    key = query.get("api_key")
    if key and key_matches(key, api_keys):
        return True
    return tokens.valid(query.get("token"))
