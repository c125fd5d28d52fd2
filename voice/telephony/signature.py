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

``stream_token(auth_token, call_sid)`` / ``stream_token_matches`` sign the CallSid that our
TwiML hands to the Media Stream as a custom ``<Parameter>``. The WebSocket connection itself
carries no POST parameters we can check, so this token is what proves a stream belongs to a call
whose webhook passed validation. It is HMAC-SHA256 with a fixed domain-separation prefix, so it
can never collide with a webhook signature.

This module knows nothing about HTTP frameworks: callers pass the URL string and a list of
(name, value) pairs.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from urllib.parse import urlsplit, urlunsplit

_DEFAULT_PORTS = {"https": 443, "http": 80, "wss": 443, "ws": 80}
_STREAM_TOKEN_PREFIX = b"diffvoice-twilio-stream-v1:"

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


def stream_token(auth_token: str, call_sid: str) -> str:
    """Token proving a Media Stream was set up by our own TwiML for ``call_sid``."""
    if not auth_token:
        raise ValueError("auth_token must be a non-empty string")
    if not call_sid:
        raise ValueError("call_sid must be a non-empty string")
    mac = hmac.new(
        auth_token.encode("utf-8"), _STREAM_TOKEN_PREFIX + call_sid.encode("utf-8"), hashlib.sha256
    )
    return mac.hexdigest()


def stream_token_matches(auth_token: str, call_sid: str, token: str | None) -> bool:
    """Constant-time check of a token produced by :func:`stream_token`."""
    if not token or not call_sid or not auth_token:
        return False
    return hmac.compare_digest(stream_token(auth_token, call_sid).encode(), token.encode())
