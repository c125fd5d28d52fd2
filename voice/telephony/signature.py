"""Twilio request signatures: the webhook check and our own per-call stream token.

Contract
--------
``twilio_signature(auth_token, url, params)`` computes what Twilio puts in the
``X-Twilio-Signature`` header of a webhook request: base64(HMAC-SHA1(auth_token, data)) where
``data`` is the full URL Twilio requested (scheme, host, path and query string, exactly as
configured in the Twilio console) followed by every POST parameter sorted by name, each name
immediately followed by its value, with no separators. A repeated name contributes each of its
values in the order received (Twilio's helper libraries do the same).

``signature_matches(auth_token, url, params, signature)`` compares in constant time
(``hmac.compare_digest``). Like Twilio's own validators it also accepts the same URL with the
default port written out or left out (``https://h/x`` vs ``https://h:443/x``), because proxies
disagree about which form they forward; nothing else about the URL is forgiven.

``stream_token(auth_token, call_sid, caller=From)`` mints the credential our TwiML hands to the
Media Stream as a custom ``<Parameter>``; ``check_stream_token`` / ``stream_token_matches``
verify one. The WebSocket connection itself carries no POST parameters we can check, so this
token is what proves a stream belongs to a call whose webhook passed validation. It reads
``v2.<expires>.<nonce>.<mac>``: ``expires`` is a Unix time ``STREAM_TOKEN_TTL_S`` (60 s) after
the webhook, ``nonce`` 16 random hex digits (no two webhooks give the same token), and ``mac``
HMAC-SHA256 under the auth token, with a fixed domain-separation prefix (it can never collide
with a webhook signature), over the CallSid, the caller's number (``From``: a stream cannot
claim another caller's number, which owns their bookings), ``expires`` and ``nonce``. A token
shown with another CallSid or ``From``, altered, or after ``expires`` does not verify.
Single use (the first stream consumes its CallSid) is the router's job
(:mod:`voice.telephony.admission`): this module holds no state.

This module knows nothing about HTTP frameworks: callers pass the URL string and a list of
(name, value) pairs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"https": 443, "http": 80, "wss": 443, "ws": 80}
_STREAM_TOKEN_PREFIX = b"diffvoice-twilio-stream-v2:"
_STREAM_TOKEN_VERSION = "v2"
STREAM_TOKEN_TTL_S = 60.0  # Twilio opens the stream within a second or two of our TwiML

Params = Mapping[str, str] | Iterable[tuple[str, str]]


def _pairs(params: Params) -> list[tuple[str, str]]:
    items = params.items() if isinstance(params, Mapping) else params
    return [(str(name), str(value)) for name, value in items]


def signed_payload(url: str, params: Params) -> str:
    """The exact string Twilio signs: URL, then name+value for each parameter sorted by name."""
    # A stable sort on the name keeps repeated names in the order they were received.
    ordered = sorted(_pairs(params), key=lambda pair: pair[0])
    return url + "".join(name + value for name, value in ordered)


def twilio_signature(auth_token: str, url: str, params: Params) -> str:
    """The value Twilio sends in ``X-Twilio-Signature`` for ``url`` and ``params``."""
    if not auth_token:
        raise ValueError("auth_token must be a non-empty string")
    digest = hmac.new(
        auth_token.encode("utf-8"), signed_payload(url, params).encode("utf-8"), hashlib.sha1
    ).digest()
    return base64.b64encode(digest).decode("ascii")


def url_variants(url: str) -> list[str]:
    """``url`` as given, plus the same URL with its default port added or removed."""
    parts = urlsplit(url)
    default_port = _DEFAULT_PORTS.get(parts.scheme)
    variants = [url]
    if default_port is None or parts.hostname is None:
        return variants
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    userinfo = parts.netloc.rpartition("@")[0]
    prefix = f"{userinfo}@" if userinfo else ""
    if parts.port is None:
        netloc = f"{prefix}{host}:{default_port}"
    elif parts.port == default_port:
        netloc = f"{prefix}{host}"
    else:
        return variants
    variants.append(urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)))
    return variants


def signature_matches(auth_token: str, url: str, params: Params, signature: str | None) -> bool:
    """True if ``signature`` is Twilio's signature of ``url`` + ``params`` under ``auth_token``."""
    if not signature or not auth_token:
        return False
    pairs = _pairs(params)
    given = signature.encode("utf-8")
    matched = False
    for candidate in url_variants(url):
        expected = twilio_signature(auth_token, candidate, pairs).encode("ascii")
        # No early exit: every variant is compared, so timing says nothing about which one.
        matched |= hmac.compare_digest(expected, given)
    return matched


def _stream_mac(auth_token: str, call_sid: str, caller: str, expires: int, nonce: str) -> str:
    # JSON keeps the fields apart whatever characters a CallSid or From carries
    fields = json.dumps([call_sid, caller, expires, nonce], separators=(",", ":"))
    message = _STREAM_TOKEN_PREFIX + fields.encode("utf-8")
    return hmac.new(auth_token.encode("utf-8"), message, hashlib.sha256).hexdigest()


def stream_token(
    auth_token: str,
    call_sid: str,
    *,
    caller: str = "",
    now: float | None = None,
    ttl_s: float = STREAM_TOKEN_TTL_S,
    nonce: str | None = None,
) -> str:
    """A fresh token proving a Media Stream was set up by our own TwiML for ``call_sid`` (and
    the caller number ``caller``), valid for ``ttl_s`` seconds from ``now``."""
    if not auth_token:
        raise ValueError("auth_token must be a non-empty string")
    if not call_sid:
        raise ValueError("call_sid must be a non-empty string")
    if not ttl_s > 0:
        raise ValueError(f"ttl_s must be > 0, got {ttl_s!r}")
    expires = int((time.time() if now is None else now) + ttl_s + 0.999)
    nonce = nonce if nonce is not None else secrets.token_hex(8)
    if not nonce.isalnum():
        raise ValueError("nonce must be letters and digits")
    mac = _stream_mac(auth_token, call_sid, caller or "", expires, nonce)
    return f"{_STREAM_TOKEN_VERSION}.{expires}.{nonce}.{mac}"


def check_stream_token(
    auth_token: str, call_sid: str, token: str | None, *, caller: str = "",
    now: float | None = None,
) -> str | None:
    """Why ``token`` does not admit a stream of ``call_sid`` from ``caller`` (None: it does):
    "missing", "invalid" (malformed, altered, another call or caller, another secret) or
    "expired" (genuine but past its expiry). The MAC is compared in constant time, and
    checked before the expiry, so "expired" is only ever said of a token we minted."""
    if not token:
        return "missing"
    if not auth_token or not call_sid:
        return "invalid"
    parts = token.split(".")
    if len(parts) != 4 or parts[0] != _STREAM_TOKEN_VERSION or not parts[1].isdigit() \
            or len(parts[1]) > 12 or not parts[2].isalnum():
        return "invalid"
    expires = int(parts[1])
    expected = _stream_mac(auth_token, call_sid, caller or "", expires, parts[2])
    if not hmac.compare_digest(expected.encode(), parts[3].encode("utf-8", "replace")):
        return "invalid"
    if (time.time() if now is None else now) >= expires:
        return "expired"
    return None


def stream_token_matches(
    auth_token: str, call_sid: str, token: str | None, *, caller: str = "",
    now: float | None = None,
) -> bool:
    """True if ``token`` is a current token for ``call_sid`` and ``caller``."""
    return check_stream_token(auth_token, call_sid, token, caller=caller, now=now) is None
