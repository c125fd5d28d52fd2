"""TwiML documents the webhook answers with.

Contract
--------
``connect_stream(stream_url, parameters, status_callback=None)`` returns the XML for
``<Response><Connect><Stream url=...>`` with one ``<Parameter name= value=>`` per entry, which
Twilio hands back in the Media Stream's ``start.customParameters``. ``<Connect><Stream>`` makes
the stream bidirectional: Twilio plays what we send back, and the call stays connected as long
as the WebSocket does.

``say_and_hang_up(message)`` is what we answer when we cannot take the call (e.g. the server is
misconfigured): the caller hears one sentence instead of silence.

All text goes through an XML escaper; nothing here knows about HTTP, Twilio accounts or
signatures. Twilio limits each parameter's name + value to 500 characters; longer values raise
``ValueError`` rather than being truncated silently.
"""

from __future__ import annotations

from collections.abc import Mapping
from xml.sax.saxutils import escape, quoteattr

MAX_PARAMETER_CHARS = 500
_XML_DECL = '<?xml version="1.0" encoding="UTF-8"?>'


def connect_stream(
    stream_url: str,
    parameters: Mapping[str, str],
    *,
    status_callback: str | None = None,
) -> str:
    """``<Connect><Stream>`` TwiML for a bidirectional Media Stream to ``stream_url``."""
    if not stream_url.startswith(("wss://", "ws://")):
        raise ValueError(f"stream_url must be a ws:// or wss:// URL, got {stream_url!r}")
    attrs = f"url={quoteattr(stream_url)}"
    if status_callback:
        attrs += f' statusCallback={quoteattr(status_callback)} statusCallbackMethod="POST"'
    lines = [_XML_DECL, "<Response>", "  <Connect>", f"    <Stream {attrs}>"]
    for name, value in parameters.items():
        if not name:
            raise ValueError("a <Parameter> needs a non-empty name")
        value = "" if value is None else str(value)
        if len(name) + len(value) > MAX_PARAMETER_CHARS:
            raise ValueError(
                f"<Parameter> {name!r}: name + value exceed Twilio's {MAX_PARAMETER_CHARS} chars"
            )
        lines.append(f"      <Parameter name={quoteattr(name)} value={quoteattr(value)} />")
    lines += ["    </Stream>", "  </Connect>", "</Response>"]
    return "\n".join(lines) + "\n"


def say_and_hang_up(message: str) -> str:
    """TwiML that speaks ``message`` and ends the call."""
    return f"{_XML_DECL}\n<Response><Say>{escape(message)}</Say><Hangup /></Response>\n"
