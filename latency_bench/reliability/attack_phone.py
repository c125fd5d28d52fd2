"""Issue 39's attacks on Twilio Media Streams (finding 4's phone half and finding 5), played the
way a caller who captured one signed webhook's TwiML would.

Contract:
- `await webhook(ctx, call_sid, caller) -> dict | None`: POST the signed voice webhook as Twilio
  would (From = `caller`) and return the `<Parameter>`s of the TwiML's stream (CallSid, From, To,
  token), or None when the server answered without a stream (busy TwiML).
- `start_message(call_sid, params)`: the Media Streams `start` for those parameters.
- `await media_flood(ctx, max_messages, within_s)`: one fresh call that sends 6-second media
  messages as fast as it can; -> how much it sent before the server closed it and how
  (docs/telephony.md: 1008 `audio_too_fast`).
- `await token_replay(ctx, replays)`: one webhook's token opens its stream, then is shown again
  `replays` times on other streams (the same CallSid, and another CallSid); -> every close (the
  docs: 1008 "call already has a stream" / "stream token missing or invalid").
- `await phone_cap(ctx, cap, extra, browser_probe)`: `cap + extra` calls get their TwiML first,
  then open their streams together: at most `cap` run, the rest are closed 1013 "phone lines
  busy"; while they are held `browser_probe()` (a coroutine the caller gives) must still be
  admitted. Held streams send a silence message every 0.5 s (idle reaping leaves them alone).
Every socket comes from loopback; every loop is bounded in count and time. Knows nothing about
the harness's checks.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import urllib.parse
import uuid
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from diffvoice.latency_bench.reliability.attack_api import post
from diffvoice.latency_bench.reliability.common import next_ip
from diffvoice.latency_bench.twilio_client import parse_twiml_stream, twilio_signature

SILENCE_MEDIA = base64.b64encode(b"\xff" * 160).decode()   # 20 ms of mu-law silence
HALF_SECOND = base64.b64encode(b"\xff" * 4000).decode()    # 0.5 s of it
SIX_SECONDS = base64.b64encode(b"\xff" * 48_000).decode()  # 8 kHz mu-law: 8000 bytes a second


def new_sid() -> str:
    return "CA" + uuid.uuid4().hex


def start_message(call_sid: str, params: dict[str, str]) -> str:
    sid = "MZ" + uuid.uuid4().hex
    return json.dumps({"event": "start", "streamSid": sid, "start": {
        "accountSid": "AC" + "0" * 32, "streamSid": sid, "callSid": call_sid,
        "tracks": ["inbound"], "customParameters": params,
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}})


def _media(payload: str) -> str:
    return json.dumps({"event": "media", "media": {"payload": payload}})


async def webhook(ctx, call_sid: str, caller: str) -> dict[str, str] | None:
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32, "From": caller,
            "To": "+15550100002", "CallStatus": "ringing", "Direction": "inbound"}
    reply = await post(ctx, "/telephony/twilio/voice", urllib.parse.urlencode(form).encode(), {
        "Content-Type": "application/x-www-form-urlencoded",
        "X-Twilio-Signature": twilio_signature(ctx.twilio_token, ctx.webhook, form)})
    if reply.status != 200:
        raise RuntimeError(f"signed webhook answered {reply.status}: {reply.text[:120]}")
    try:
        return parse_twiml_stream(reply.text)[1]
    except ValueError:
        return None  # busy TwiML: <Say> + <Hangup/>


class Stream:
    """One Media Stream: `open(params)` sends connected + start; `outcome(wait_s)` is
    ("open", None) or (close code, reason)."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx
        self.ws: Any = None
        self.closed: tuple[int | None, str] | None = None

    async def open(self, call_sid: str, params: dict[str, str]) -> None:
        try:
            # from an address of its own, as Twilio's streams come from a pool of them (one
            # address may hold only --max-pending-streams-per-ip sockets before 'start')
            self.ws = await connect(self.ctx.stream, ping_interval=None, open_timeout=30,
                                    max_size=None, local_addr=(next_ip(), 0))
            await self.ws.send(json.dumps({"event": "connected", "protocol": "Call",
                                           "version": "1.0.0"}))
            await self.ws.send(start_message(call_sid, params))
        except ConnectionClosed as e:
            self.closed = (e.rcvd.code if e.rcvd else None, e.rcvd.reason if e.rcvd else "")
        except (OSError, InvalidStatus, TimeoutError) as e:
            self.closed = (None, f"connect failed: {e!r}"[:80])

    async def outcome(self, wait_s: float) -> tuple[int | None, str] | tuple[str, None]:
        if self.closed is None:
            try:
                async with asyncio.timeout(wait_s):
                    async for _ in self.ws:  # bot audio, marks: read and dropped
                        pass
            except TimeoutError:
                return "open", None
            except ConnectionClosed:
                pass
            self.closed = (self.ws.close_code, self.ws.close_reason or "")
        return self.closed

    async def keep_alive(self, stop: asyncio.Event) -> None:
        """Silence at real time, as a phone line sends it (the server counts idleness in
        seconds of audio, not in messages)."""
        while not stop.is_set() and self.closed is None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(_media(HALF_SECOND))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    async def hang_up(self) -> None:
        if self.ws is not None:
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(json.dumps({"event": "stop"}))
            await self.ws.close()


async def media_flood(ctx, max_messages: int, within_s: float) -> dict[str, Any]:
    """4 (phone): 6-second media messages as fast as the socket takes them."""
    sid = new_sid()
    params = await webhook(ctx, sid, "+15550107001")
    if params is None:
        return {"close": None, "reason": "webhook answered busy", "audio_s_sent": 0}
    stream = Stream(ctx)
    await stream.open(sid, params)
    sent, t0 = 0, time.monotonic()
    if stream.closed is None:
        try:
            async with asyncio.timeout(within_s):
                for _ in range(max_messages):
                    await stream.ws.send(_media(SIX_SECONDS))
                    sent += 1
        except (ConnectionClosed, TimeoutError):
            pass
    code, reason = await stream.outcome(10.0)
    await stream.hang_up()
    return {"close": code, "reason": reason, "messages_sent": sent, "audio_s_sent": 6 * sent,
            "closed_after_s": round(time.monotonic() - t0, 2)}


async def token_replay(ctx, replays: int) -> dict[str, Any]:
    """5 (single use): one webhook's token opens one stream; shown again it opens nothing."""
    sid = new_sid()
    params = await webhook(ctx, sid, "+15550107002")
    if params is None:
        return {"first": "webhook answered busy", "replays": []}
    first = Stream(ctx)
    await first.open(sid, params)
    first_outcome = await first.outcome(1.0)
    stop = asyncio.Event()
    keeper = asyncio.create_task(first.keep_alive(stop))
    others = []
    for i in range(replays):  # the same CallSid (a second stream of the call), then another
        other = Stream(ctx)
        await other.open(sid if i % 2 == 0 else new_sid(), params)
        others.append(other)
    closes = await asyncio.gather(*(s.outcome(10.0) for s in others))
    stop.set()
    await keeper
    for s in [first, *others]:
        await s.hang_up()
    return {"first": first_outcome[0], "replays": [list(c) for c in closes]}


async def phone_cap(ctx, cap: int, extra: int, browser_probe) -> dict[str, Any]:
    """5 (cap): cap + extra calls' streams at once; the cap holds and a browser still gets in."""
    calls = []
    for i in range(cap + extra):  # every TwiML first, while lines are free
        sid = new_sid()
        params = await webhook(ctx, sid, f"+1555011{i:04d}")
        if params is not None:
            calls.append((sid, params))
    streams = [Stream(ctx) for _ in calls]
    await asyncio.gather(*(s.open(sid, p) for s, (sid, p) in zip(streams, calls, strict=True)))
    outcomes = await asyncio.gather(*(s.outcome(3.0) for s in streams))
    stop = asyncio.Event()
    keepers = [asyncio.create_task(s.keep_alive(stop)) for s in streams if s.closed is None]
    try:
        browser = await browser_probe()
    finally:
        stop.set()
        await asyncio.gather(*keepers)
        for s in streams:
            await s.hang_up()
    admitted = sum(o[0] == "open" for o in outcomes)
    refusals: dict[str, int] = {}
    for code, reason in outcomes:
        if code != "open":
            key = f"{code} {reason}"
            refusals[key] = refusals.get(key, 0) + 1
    return {"twiml_streams": len(calls), "admitted": admitted, "refusals": refusals,
            "browser": browser}
