"""Who may open a /ws call, call /v1 and read /metrics: Origin allow-list, API keys, tokens.

Contract:
- `origin_allowed(origin, allowed)`: a browser always sends `Origin` on a WebSocket upgrade (and
  on every cross-site POST), so a page on another site can be told apart. Allowed: no Origin at
  all (not a browser: curl, websockets, SDKs, pipecat clients), http(s)://localhost /
  127.0.0.1 / [::1] on any port, every entry of `allowed` (exact origins, or "*" for any). The
  request's `Host` header is never trusted: under DNS rebinding a foreign page reaches a local
  server with its own name in both `Host` and `Origin`.
- `allowed_origins(config)`: the configured `allowed_origins` plus the server's own
  (`server_origins`: http(s)://<host>:<port> when `host` names one interface, and the origin of
  `public_url`), i.e. the pages this server itself serves. A deployer serving the page under
  another name (`--host 0.0.0.0` reached as http://box.lan:8000, a proxy) adds that origin
  with `--allowed-origins`.
- `host_allowed(host, allowed)`: the DNS rebinding guard on the `Host` header (issue 54 N11;
  voice.api_guard.HostGuardMiddleware applies it to every route without API keys). Allowed: no
  Host at all (not a browser), localhost, any IP address (rebinding needs a name the attacker's
  DNS answers for; a page whose URL is an address is this server's own or another origin), and
  every entry of `allowed` (names, compared without the port and a trailing dot, case-blind;
  "*" allows any).
- `allowed_hosts(config)`: the configured `allowed_hosts`, plus `--host` and the host of
  `public_url`.
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
import ipaddress
import secrets
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit

LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]", "::1"})
SESSION_TOKEN_TTL_S = 300.0


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})


def origin_allowed(origin: str | None, allowed: Iterable[str]) -> bool:
    if origin is None:
        return True
    allowed = tuple(allowed)
    if "*" in allowed or origin.rstrip("/").lower() in {a.rstrip("/").lower() for a in allowed}:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return False
    return (parts.hostname or "").lower() in LOCAL_HOSTS


def server_origins(host: str, port: int, public_url: str | None = None) -> tuple[str, ...]:
    """The origins of pages this server serves itself: its configured interface (unless it
    listens on all of them, or on a port picked at start) and its public URL."""
    origins = []
    if host not in WILDCARD_HOSTS and port:
        name = f"[{host}]" if ":" in host and not host.startswith("[") else host
        origins += [f"http://{name}:{port}", f"https://{name}:{port}"]
    if public_url:
        parts = urlsplit(public_url)
        if parts.scheme in ("http", "https") and parts.netloc:
            origins.append(f"{parts.scheme}://{parts.netloc}")
    return tuple(origins)


def allowed_origins(config) -> tuple[str, ...]:
    """`config.allowed_origins` plus `server_origins` of `config` (any ServeConfig-like)."""
    return tuple(getattr(config, "allowed_origins", ()) or ()) + server_origins(
        str(getattr(config, "host", "") or ""), int(getattr(config, "port", 0) or 0),
        getattr(config, "public_url", None))


def host_name(host: str) -> str:
    """The name in a Host header value: without the port, brackets and a trailing dot,
    lower-cased ("[::1]:8000" -> "::1", "LocalHost.:80" -> "localhost")."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:].partition("]")[0]
    if host.count(":") == 1:
        host = host.partition(":")[0]
    return host.rstrip(".")


def _is_address(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def host_allowed(host: str | None, allowed: Iterable[str]) -> bool:
    allowed = tuple(allowed)
    if host is None or "*" in allowed:
        return True
    name = host_name(host)
    return (name in LOCAL_HOSTS or _is_address(name)
            or name in {host_name(a) for a in allowed})


def allowed_hosts(config) -> tuple[str, ...]:
    """`config.allowed_hosts` plus the names this server is configured under (`host` unless it
    listens on every interface, and the host of `public_url`)."""
    hosts = list(getattr(config, "allowed_hosts", ()) or ())
    host = str(getattr(config, "host", "") or "")
    if host not in WILDCARD_HOSTS:
        hosts.append(host)
    public_url = getattr(config, "public_url", None)
    if public_url and urlsplit(public_url).hostname:
        hosts.append(urlsplit(public_url).hostname)
    return tuple(hosts)


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


SUBPROTOCOL_KEY = "openai-insecure-api-key."


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
    for proto in (headers.get("sec-websocket-protocol") or "").split(","):
        proto = proto.strip()  # the openai SDK's browser form (Realtime clients)
        if proto.startswith(SUBPROTOCOL_KEY) and key_matches(proto[len(SUBPROTOCOL_KEY):],
                                                             api_keys):
            return True
    return tokens.valid(query.get("token"))
