"""Telephony settings, read from the server's ServeConfig, plus the start-up banner.

Contract
--------
:class:`TelephonyConfig` is the frozen, validated view of the ServeConfig fields telephony
uses (``public_url``, ``twilio_auth_token``, ``twilio_validate``, ``latency_log``, and optionally
``status_callback_log`` / ``twilio_account_sid``). :meth:`TelephonyConfig.from_serve_config`
reads them with ``getattr`` so this package does not break while ServeConfig grows; a missing
``twilio_auth_token`` falls back to the ``TWILIO_AUTH_TOKEN`` environment variable.

``public_url`` is the scheme + host (+ optional path prefix) Twilio uses to reach this server,
e.g. ``https://abc123.ngrok-free.app``. Behind a tunnel or proxy the request's own host/scheme
are wrong, and the webhook signature covers the exact URL Twilio requested, so the webhook and
the ``wss://`` stream URL are always built from it when it is set.

:func:`webhook_banner` returns the lines ``diffvoice serve`` prints: the URLs to paste into the
Twilio console and whether signature validation is on. :func:`startup_warnings` returns the
loud warnings (validation off, no token, no public URL).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from urllib.parse import urlsplit

VOICE_PATH = "/telephony/twilio/voice"
STREAM_PATH = "/telephony/twilio/stream"
STATUS_PATH = "/telephony/twilio/status"


@dataclass(frozen=True)
class TelephonyConfig:
    public_url: str | None = None
    twilio_auth_token: str | None = None
    twilio_validate: bool = True
    latency_log: str | None = None
    status_callback_log: str | None = None
    twilio_account_sid: str | None = None
    handshake_timeout_s: float = 10.0
    wait_for_echo_s: float = 10.0

    def __post_init__(self):
        if self.public_url is not None:
            parts = urlsplit(self.public_url)
            if parts.scheme not in ("https", "http") or not parts.netloc:
                raise ValueError(
                    f"public_url must look like https://host[:port][/prefix], "
                    f"got {self.public_url!r}"
                )
            if parts.query or parts.fragment:
                raise ValueError("public_url must not carry a query string or fragment")
            object.__setattr__(self, "public_url", self.public_url.rstrip("/"))
        if self.twilio_auth_token is not None and not self.twilio_auth_token.strip():
            object.__setattr__(self, "twilio_auth_token", None)
        if self.handshake_timeout_s <= 0:
            raise ValueError("handshake_timeout_s must be > 0")
        if self.wait_for_echo_s <= 0:
            raise ValueError("wait_for_echo_s must be > 0")

    @classmethod
    def from_serve_config(cls, config) -> TelephonyConfig:
        token = getattr(config, "twilio_auth_token", None) or os.environ.get("TWILIO_AUTH_TOKEN")
        log = getattr(config, "latency_log", None)
        status_log = getattr(config, "status_callback_log", None) or log
        return cls(
            public_url=getattr(config, "public_url", None) or None,
            twilio_auth_token=token or None,
            twilio_validate=bool(getattr(config, "twilio_validate", True)),
            latency_log=str(log) if log else None,
            status_callback_log=str(status_log) if status_log else None,
            twilio_account_sid=getattr(config, "twilio_account_sid", None)
            or os.environ.get("TWILIO_ACCOUNT_SID")
            or None,
        )

    @property
    def ready(self) -> bool:
        """Whether webhooks can be answered: a token to validate with, or validation off."""
        return bool(self.twilio_auth_token) or not self.twilio_validate

    def public_http_url(self, path: str) -> str | None:
        return f"{self.public_url}{path}" if self.public_url else None

    def public_ws_url(self, path: str) -> str | None:
        if not self.public_url:
            return None
        scheme, rest = self.public_url.split("://", 1)
        return f"{'wss' if scheme == 'https' else 'ws'}://{rest}{path}"


def startup_warnings(cfg: TelephonyConfig) -> list[str]:
    warnings = []
    if not cfg.twilio_validate:
        warnings.append(
            "TWILIO SIGNATURE VALIDATION IS OFF (--no-twilio-validate). Anyone who can reach this "
            "server can place calls into the agent and spend its GPU. Use only for local testing."
        )
    elif not cfg.twilio_auth_token:
        warnings.append(
            "Twilio endpoints are disabled: set TWILIO_AUTH_TOKEN (or --twilio-auth-token) so "
            "webhook signatures can be validated."
        )
    if not cfg.public_url:
        warnings.append(
            "No --public-url: Twilio URLs are derived from each request's Host header, which is "
            "wrong behind a tunnel or proxy and makes every signature check fail."
        )
    elif cfg.public_url.startswith("http://"):
        warnings.append("--public-url is http://: Twilio needs https:// and wss:// in production.")
    return warnings


def webhook_banner(config) -> str:
    """Lines to print at start-up. ``config`` is a ServeConfig or a TelephonyConfig."""
    if isinstance(config, TelephonyConfig):
        cfg = config
    else:
        cfg = TelephonyConfig.from_serve_config(config)
    if cfg.public_url:
        lines = [
            "Twilio: set your number's 'A call comes in' webhook (HTTP POST) to",
            f"  {cfg.public_http_url(VOICE_PATH)}",
            f"  call status callback (optional, POST): {cfg.public_http_url(STATUS_PATH)}",
            f"  media stream (sent to Twilio in the TwiML): {cfg.public_ws_url(STREAM_PATH)}",
        ]
    else:
        lines = [f"Twilio: webhook path {VOICE_PATH} (pass --public-url https://... to print it)"]
    if cfg.twilio_validate and cfg.twilio_auth_token:
        lines.append("  signature validation: on")
    lines += [f"  WARNING: {w}" for w in startup_warnings(cfg)]
    return "\n".join(lines)
