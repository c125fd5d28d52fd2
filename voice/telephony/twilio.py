"""FastAPI routes for Twilio: voice webhook, Media Stream WebSocket, status callback.

Contract
--------
``make_router(state, *, calls=None, build_pipeline=None) -> APIRouter`` (``state``:
voice.state.AppState; uses ``config``, and when present ``latency_log``, ``active_sessions`` and
``metrics``; ``build_pipeline`` defaults to voice.pipeline.build_pipeline) serves:

- ``POST /telephony/twilio/voice``: checks ``X-Twilio-Signature`` against the public webhook URL
  and the form parameters (403 and a log line if missing or wrong), then answers TwiML
  ``<Connect><Stream url="wss://PUBLIC/telephony/twilio/stream">`` with ``<Parameter>``s
  ``CallSid``, ``From``, ``To`` and ``token`` (bound to the CallSid and From, expiring in 60 s:
  :mod:`voice.telephony.signature`). At ``max_sessions`` or at the phone-call cap it answers
  TwiML that says the lines are busy and hangs up.
- ``WS /telephony/twilio/stream``: reads ``connected``/``start`` (closing the socket with a code
  and reason if they are wrong), then admits the stream only if its token verifies for the
  ``start``'s CallSid and the ``From`` parameter (1008 "stream token missing or invalid" /
  "stream token expired"), its CallSid has had no stream yet (1008 "call already has a
  stream": tokens are single use, one stream per call), a phone-call slot is free (1013
  "phone lines busy", :func:`voice.telephony.admission.phone_call_limit`) and the server is
  under ``max_sessions`` (1013). Then it runs one pipeline from
  :func:`voice.pipeline.build_pipeline` over :class:`TwilioMediaStreamTransport` until Twilio
  sends ``stop``, the socket drops, or the pipeline ends. Every outcome is confined to that call.
  The stream's single-use claims and phone slots are ``state.phone_admission`` (shared by every
  worker with ``serve --workers``), else the router's own :class:`PhoneAdmission`; each claim is
  also written to ``--twilio-claims-db`` (:mod:`voice.telephony.claims`), so a signed webhook
  replayed after a restart opens nothing either (1008 "call already has a stream").
- ``POST /telephony/twilio/status``: signature-checked; appends one JSON line
  ``{"type": "twilio.status", "t": ..., <call/stream status fields>}`` to the log (phone numbers
  are not logged).

Each finished turn's latency record, enriched by :class:`PlayoutTracker` with when the caller
heard the answer, is appended to the JSON-lines latency log as ``{"type": "telephony.playout",
...}`` (the plain record was already written by the pipeline). ``calls`` (an
:class:`ActiveCalls`) lets tests and the server see calls in progress.

Limits (ServeConfig, shared with /ws): before ``start``, at most ``max_pending_streams``
sockets in all and ``max_pending_streams_per_ip`` from one client IP may be open; one more is
closed 1013 "too many streams waiting for start" at once (issue 54: 200 sockets that never sent
``start`` were all accepted); more than ``ws_message_rate`` messages a second beyond
``ws_message_burst`` -> close 1008 "message_rate" (voice.transport.message_rate); the call's
audio output stalled -> close 1013 "output_stalled";
no ``start`` within ``handshake_timeout_s`` -> close 1008;
less than a second of caller audio (empty ``media`` count nothing) for ``idle_timeout_s`` ->
close 1008 "idle_timeout"; a call ``max_call_s`` old ->
close 1008 "max_duration"; more than ``MAX_MALFORMED`` malformed messages after ``start`` -> close
1007 "malformed_messages" (a single malformed one is logged and skipped, see media_stream). A
webhook whose parameters do not fit TwiML (a CallSid/From over 500 characters) gets 400; webhook
bodies are capped by voice.body_limit before they are read (413).

With ``twilio_validate`` off, no signature or token is checked (local testing only; a loud
warning is logged when the router is made).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import time
from collections.abc import Callable
from urllib.parse import parse_qsl

from fastapi import APIRouter, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import PlainTextResponse, Response

from diffvoice.voice.call_limits import ClientSlots
from diffvoice.voice.telephony import signature, twiml
from diffvoice.voice.telephony.admission import (
    PhoneAdmission,
    claim_retention_s,
    phone_call_limit,
)
from diffvoice.voice.telephony.claims import ClaimStore
from diffvoice.voice.telephony.claims import default_path as default_claims_path
from diffvoice.voice.telephony.config import (
    STATUS_PATH,
    STREAM_PATH,
    VOICE_PATH,
    TelephonyConfig,
    startup_warnings,
)
from diffvoice.voice.telephony.handshake import (
    CLOSE_POLICY,
    HandshakeError,
    StreamHandshake,
    StreamStart,
)
from diffvoice.voice.telephony.twilio_call import ActiveCalls, CallLimits, log_writer, run_call
from diffvoice.voice.transport.message_rate import limit_socket

logger = logging.getLogger(__name__)

CLOSE_TRY_AGAIN_LATER = 1013
PENDING_REASON = "too many streams waiting for start"

SIGNATURE_HEADER = "X-Twilio-Signature"
STATUS_FIELDS = (
    "CallSid", "CallStatus", "CallDuration", "Direction", "Timestamp", "SequenceNumber",
    "CallbackSource", "StreamSid", "StreamName", "StreamEvent", "StreamError", "ErrorCode",
    "AccountSid",
)  # fmt: skip
def _at_capacity(state) -> bool:
    limit = getattr(state.config, "max_sessions", None)
    if limit is None:
        return False
    if hasattr(state, "sessions_open"):  # every worker's calls with serve --workers
        return state.sessions_open() >= limit
    active = getattr(state, "active_sessions", None)
    return active is not None and len(active) >= limit


def _webhook_url(cfg: TelephonyConfig, request: Request) -> str:
    """The URL Twilio signed: the public URL when configured, else what the request says."""
    query = request.url.query
    if cfg.public_url:
        return cfg.public_url + request.url.path + (f"?{query}" if query else "")
    return str(request.url)


def _stream_url(cfg: TelephonyConfig, request: Request) -> str:
    if cfg.public_url:
        return cfg.public_ws_url(STREAM_PATH)
    scheme = "wss" if request.url.scheme == "https" else "ws"
    return f"{scheme}://{request.url.netloc}{STREAM_PATH}"


async def _checked_form(cfg: TelephonyConfig, request: Request) -> list[tuple[str, str]] | Response:
    """The POST parameters, or the error response if the request must be refused."""
    if not cfg.ready:
        logger.error("twilio: refused %s: no auth token configured", request.url.path)
        return PlainTextResponse("telephony not configured", status_code=503)
    # Twilio posts application/x-www-form-urlencoded; parsed here so no multipart dependency.
    body = await request.body()
    try:
        params = parse_qsl(body.decode("utf-8"), keep_blank_values=True)
    except UnicodeDecodeError:
        return PlainTextResponse("form body is not UTF-8", status_code=400)
    if not cfg.twilio_validate:
        return params
    given = request.headers.get(SIGNATURE_HEADER)
    url = _webhook_url(cfg, request)
    if not signature.signature_matches(cfg.twilio_auth_token, url, params, given):
        client = request.client.host if request.client else "?"
        why = "missing" if not given else "invalid"
        logger.warning(
            "twilio: 403 for %s from %s: %s %s (signed URL assumed: %s)",
            request.url.path, client, why, SIGNATURE_HEADER, url,
        )  # fmt: skip
        return PlainTextResponse("invalid Twilio signature", status_code=403)
    return params


async def _read_handshake(ws: WebSocket, timeout_s: float) -> StreamStart:
    handshake = StreamHandshake()
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise HandshakeError(CLOSE_POLICY, "no 'start' message in time")
        try:
            message = await asyncio.wait_for(ws.receive(), remaining)
        except TimeoutError:
            raise HandshakeError(CLOSE_POLICY, "no 'start' message in time") from None
        if message["type"] == "websocket.disconnect":
            raise WebSocketDisconnect(message.get("code", 1000))
        data = message.get("text") if message.get("text") is not None else message.get("bytes")
        result = handshake.feed(data if data is not None else b"")
        if result is not None:
            return result


def make_router(
    state, *, calls: ActiveCalls | None = None, build_pipeline: Callable | None = None
) -> APIRouter:
    """See the module docstring. ``build_pipeline`` defaults to voice.pipeline.build_pipeline."""
    cfg = TelephonyConfig.from_serve_config(state.config)
    limits = CallLimits.from_config(state.config)
    for warning in startup_warnings(cfg):
        logger.warning("!!! %s", warning)
    calls = calls if calls is not None else ActiveCalls()
    phones = getattr(state, "phone_admission", None) or PhoneAdmission(
        phone_call_limit(state.config), claim_retention_s(state.config))
    claims = _claim_store(state.config, cfg)
    retention_s = claim_retention_s(state.config)
    pending = ClientSlots(int(getattr(state.config, "max_pending_streams_per_ip", 8)))
    max_pending = int(getattr(state.config, "max_pending_streams", 32))
    router = APIRouter()
    router.calls = calls  # type: ignore[attr-defined]  # for the server's /healthz and tests
    router.phones = phones  # type: ignore[attr-defined]
    router.pending = pending  # type: ignore[attr-defined]  # stream sockets before 'start'
    status_log = log_writer(state, cfg.status_callback_log)

    @router.post(VOICE_PATH)
    async def voice_webhook(request: Request) -> Response:
        params = await _checked_form(cfg, request)
        if isinstance(params, Response):
            return params
        fields = dict(params)
        call_sid = fields.get("CallSid", "")
        if not call_sid:
            return PlainTextResponse("missing CallSid", status_code=400)
        full = _at_capacity(state) or (
            phones.limit is not None and phones.open_calls() >= phones.limit)
        if full:
            logger.warning("twilio %s: refused, server at max_sessions or max_phone_calls",
                           call_sid)
            body = twiml.say_and_hang_up("Sorry, all our lines are busy. Please call again later.")
            return Response(body, media_type="application/xml")
        stream_params = {
            "CallSid": call_sid,
            "From": fields.get("From", ""),
            "To": fields.get("To", ""),
        }
        if cfg.twilio_auth_token:
            stream_params["token"] = signature.stream_token(
                cfg.twilio_auth_token, call_sid, caller=stream_params["From"])
        status_url = cfg.public_http_url(STATUS_PATH)
        try:
            body = twiml.connect_stream(
                _stream_url(cfg, request), stream_params, status_callback=status_url
            )
        except ValueError as e:  # e.g. a CallSid/From longer than a <Parameter> may be
            logger.warning("twilio: 400 for %s: %s", VOICE_PATH, str(e)[:200])
            return PlainTextResponse(f"bad webhook parameters: {str(e)[:200]}", status_code=400)
        logger.info("twilio %s: answering with a Media Stream", call_sid)
        return Response(body, media_type="application/xml")

    @router.post(STATUS_PATH)
    async def status_callback(request: Request) -> Response:
        params = await _checked_form(cfg, request)
        if isinstance(params, Response):
            return params
        fields = dict(params)
        event = {"type": "twilio.status", "t": time.time()}
        event.update({k: fields[k] for k in STATUS_FIELDS if k in fields})
        status_log(event)
        return Response(status_code=204)

    @router.websocket(STREAM_PATH)
    async def media_stream(ws: WebSocket) -> None:
        await ws.accept()
        client_ip = ws.client.host if ws.client else "?"
        if pending.held() >= max_pending or not pending.acquire(client_ip):
            logger.warning("twilio: closing a stream from %s: %d streams already wait for "
                           "'start' (max_pending_streams %d, per IP %d)", client_ip,
                           pending.held(), max_pending, pending.limit)
            await ws.close(code=CLOSE_TRY_AGAIN_LATER, reason=PENDING_REASON)
            return
        message_rate = limit_socket(ws, state.config)
        try:
            start = await _read_handshake(ws, limits.handshake_timeout_s)
        except WebSocketDisconnect:
            logger.info("twilio: stream closed before 'start'")
            return
        except HandshakeError as e:
            logger.warning("twilio: closing stream: %s", e)
            await ws.close(code=e.code, reason=e.reason)
            return
        finally:
            pending.release(client_ip)
        refusal = _refusal(cfg, phones, start, claims, retention_s)
        if refusal is None and _at_capacity(state):
            phones.release()
            refusal = (CLOSE_TRY_AGAIN_LATER, "server at capacity")
        if refusal is not None:
            logger.warning("twilio %s: closing stream: %s", start.call_sid, refusal[1])
            await ws.close(code=refusal[0], reason=refusal[1])
            return
        try:
            await run_call(state, cfg, calls, ws, start, build_pipeline, status_log, limits,
                           message_rate=message_rate)
        finally:
            phones.release()

    return router


def _claim_store(config, cfg: TelephonyConfig) -> ClaimStore | None:
    """The on-disk stream claims (`twilio_claims_db`, else one file per auth token in the
    user's data directory); None (claims in memory only, said at start-up) when it cannot be
    opened."""
    path = getattr(config, "twilio_claims_db", None) or default_claims_path(
        cfg.twilio_auth_token)
    try:
        return ClaimStore(path)
    except (OSError, sqlite3.Error) as exc:
        logger.warning(f"!!! Twilio stream claims kept in memory only ({path}: {exc}): a signed "
                       "webhook replayed after a restart could open a second stream")
        return None


def _refusal(cfg: TelephonyConfig, phones, start: StreamStart, claims: ClaimStore | None = None,
             retention_s: float = 0.0) -> tuple[int, str] | None:
    """(close code, reason) when this stream may not run, else None with a phone slot held:
    a token that does not verify for this CallSid and From, a CallSid that already had its
    stream in this process or, on disk, in any process before (checked and claimed at once:
    single use), or every phone slot taken."""
    if cfg.twilio_validate:
        why = signature.check_stream_token(
            cfg.twilio_auth_token or "", start.call_sid, start.custom_parameters.get("token"),
            caller=start.custom_parameters.get("From", ""))
        if why == "expired":
            return CLOSE_POLICY, "stream token expired"
        if why is not None:
            return CLOSE_POLICY, "stream token missing or invalid"
    if not phones.claim(start.call_sid):
        return CLOSE_POLICY, "call already has a stream"
    if claims is not None:
        try:
            fresh = claims.claim(start.call_sid, time.time() + retention_s)
        except sqlite3.Error as exc:
            logger.error(f"twilio: stream claims file: {exc}")
            return CLOSE_TRY_AGAIN_LATER, "phone lines busy"
        if not fresh:  # served before a restart: a replayed webhook's fresh token
            return CLOSE_POLICY, "call already has a stream"
    if not phones.acquire():
        return CLOSE_TRY_AGAIN_LATER, "phone lines busy"
    return None
