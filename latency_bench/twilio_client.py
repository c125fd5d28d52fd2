"""One simulated phone call over Twilio Media Streams, measured from the caller's side only.

Contract: `await run_twilio_session(config, url, session, prompts, concurrency, on_turn)` plays
Twilio's part of a call against any server that speaks the Media Streams protocol:

- `url` http(s)://.../voice: POST the voice webhook the way Twilio does (form fields CallSid,
  AccountSid, From, To, CallStatus, Direction; `X-Twilio-Signature` when
  `config.twilio_auth_token` is set), read `<Connect><Stream url>` and its `<Parameter>`s from
  the TwiML, and open that stream (wss:// is read as ws:// when the webhook was plain http on
  the same host, i.e. a local server). `url` ws(s)://: open the stream directly.
- send `connected`, `start` (streamSid, callSid, customParameters, mediaFormat mu-law/8000/1),
  then one `media` message per 20 ms (160 mu-law bytes, paced by the clock), prompts resampled
  to 8 kHz, silence in between; `stop` at the end.
- bot audio: `media` payloads go through the same playback-queue model as the browser client
  (`Playout`, 8 kHz); `mark`s are echoed when playback reaches them, `clear` flushes the queue
  and echoes pending marks at once, as Twilio does.
- turns: the first *audible* bot sample after the end of user speech (energy above
  `energy_threshold_db`) gives voice_to_voice; the answer is over once `bot_quiet_s` of heard
  silence has passed. Bot audio heard before the prompt's last speech marks that turn "error"
  and `premature_eot` (the server cut the caller off at a pause, as the browser client counts
  it); heard in the prompt's trailing silence it is the turn's answer. Only voice_to_voice is
  measured this way (the server's stage timings do not travel over Media Streams; the bench
  reads them from the server's latency log afterwards: latency_bench.server_records).
  `on_turn(TurnResult)` is called once per prompt, always; failures mark the current and
  remaining turns, as in the browser client.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
import time
import urllib.parse
import urllib.request
import uuid
import xml.etree.ElementTree as ElementTree
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import soxr
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt
from diffvoice.latency_bench.pacer import Pacer
from diffvoice.latency_bench.playout import Playout
from diffvoice.latency_bench.source_addr import connect_kwargs
from diffvoice.latency_bench.turns import TurnResult, planned_turn
from diffvoice.voice.telephony import mulaw

PHONE_RATE = 8000
FRAME_SAMPLES = PHONE_RATE // 50                       # 20 ms
SILENCE = mulaw.encode(np.zeros(FRAME_SAMPLES, np.int16))


def twilio_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    """base64(HMAC-SHA1(token, url + name1 + value1 + ... sorted by name)), Twilio's scheme."""
    payload = url + "".join(f"{k}{params[k]}" for k in sorted(params))
    digest = hmac.new(auth_token.encode(), payload.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def parse_twiml_stream(twiml: str) -> tuple[str, dict[str, str]]:
    """The `<Connect><Stream url>` and its `<Parameter name value>`s from a TwiML answer."""
    try:
        root = ElementTree.fromstring(twiml)
    except ElementTree.ParseError as exc:
        raise ValueError(f"webhook answer is not TwiML: {exc}") from exc
    stream = root.find("./Connect/Stream")
    if stream is None or not stream.get("url"):
        raise ValueError("webhook TwiML has no <Connect><Stream url=...>")
    params = {p.get("name", ""): p.get("value", "") for p in stream.findall("Parameter")}
    return stream.get("url", ""), params


def _post_webhook(config: BenchConfig, url: str, call_sid: str) -> tuple[str, dict[str, str]]:
    form = {"CallSid": call_sid, "AccountSid": "AC" + "0" * 32, "From": "+15550100001",
            "To": "+15550100002", "CallStatus": "ringing", "Direction": "inbound",
            "ApiVersion": "2010-04-01"}
    headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if config.twilio_auth_token:
        headers["X-Twilio-Signature"] = twilio_signature(config.twilio_auth_token, url, form)
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(),
                                     headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=config.connect_timeout_s) as response:
        stream_url, params = parse_twiml_stream(response.read().decode("utf-8"))
    webhook, stream = urllib.parse.urlsplit(url), urllib.parse.urlsplit(stream_url)
    if webhook.scheme == "http" and stream.scheme == "wss" and stream.netloc == webhook.netloc:
        stream_url = urllib.parse.urlunsplit(stream._replace(scheme="ws"))
    return stream_url, params


class _Call:
    """Twilio's side of one stream: message numbering, playback, marks."""

    def __init__(self, ws: Any, threshold_db: float) -> None:
        self.ws = ws
        self.stream_sid = "MZ" + uuid.uuid4().hex
        self.sequence = 0
        self.chunk = 0
        self.playout = Playout(PHONE_RATE, threshold_db)
        self.error: str | None = None
        self.closed = False
        self._mark_tasks: set[asyncio.Task] = set()

    async def send(self, event: str, **body: Any) -> None:
        self.sequence += 1
        message = {"event": event, "sequenceNumber": str(self.sequence), **body}
        if event != "connected":
            message["streamSid"] = self.stream_sid
        await self.ws.send(json.dumps(message))

    async def send_media(self, payload: bytes) -> None:
        self.chunk += 1
        await self.send("media", media={"track": "inbound", "chunk": str(self.chunk),
                                        "timestamp": str(self.chunk * 20),
                                        "payload": base64.b64encode(payload).decode("ascii")})

    async def _echo_mark(self, name: str, delay_s: float) -> None:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        try:
            await self.send("mark", mark={"name": name})
        except ConnectionClosed:
            pass

    def _schedule_mark(self, name: str, delay_s: float) -> None:
        task = asyncio.create_task(self._echo_mark(name, delay_s))
        self._mark_tasks.add(task)
        task.add_done_callback(self._mark_tasks.discard)

    async def read(self) -> None:
        pending_marks: list[tuple[float, str]] = []
        try:
            async for raw in self.ws:
                now = time.time()
                message = json.loads(raw)
                event = message.get("event") if isinstance(message, dict) else None
                if event == "media":
                    payload = base64.b64decode(message["media"]["payload"])
                    self.playout.push(mulaw.decode(payload), now)
                elif event == "mark":
                    name = str(message.get("mark", {}).get("name", ""))
                    played_at = self.playout.playing_until(now)
                    pending_marks = [(t, n) for t, n in pending_marks if t > now]
                    pending_marks.append((played_at, name))
                    self._schedule_mark(name, played_at - now)
                elif event == "clear":
                    self.playout.flush(now)
                    for task in list(self._mark_tasks):    # cleared audio: echo marks now
                        task.cancel()
                    for _, name in pending_marks:
                        self._schedule_mark(name, 0.0)
                    pending_marks = []
        except ConnectionClosed as exc:
            self.error = f"stream closed: {exc}"
        except (ValueError, KeyError, TypeError) as exc:
            self.error = f"undecodable Media Streams message: {exc}"
        else:
            self.error = "stream closed by the server"
        self.closed = True

    async def cancel_marks(self) -> None:
        for task in list(self._mark_tasks):
            task.cancel()
        await asyncio.gather(*self._mark_tasks, return_exceptions=True)


def _phone_audio(prompt: Prompt) -> tuple[np.ndarray, int]:
    """The prompt at 8 kHz, padded to whole frames, and the sample where speech ends."""
    x = soxr.resample(prompt.pcm.astype(np.float32) / 32768.0, SAMPLE_RATE, PHONE_RATE)
    pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
    padded = np.zeros(-(-len(pcm) // FRAME_SAMPLES) * FRAME_SAMPLES, np.int16)
    padded[: len(pcm)] = pcm
    return padded, min(len(pcm), int(round(prompt.speech_end_s * PHONE_RATE)))


async def _run_turn(config: BenchConfig, pacer: Pacer, call: _Call, prompt: Prompt,
                    result: TurnResult) -> None:
    call.playout.start_turn()
    pacer.take_lag_s()
    pcm, end_sample = _phone_audio(prompt)
    end_frame = max(0, (end_sample - 1) // FRAME_SAMPLES)
    for k in range(len(pcm) // FRAME_SAMPLES):
        sent_t = await pacer.send(mulaw.encode(pcm[k * FRAME_SAMPLES:(k + 1) * FRAME_SAMPLES]))
        if k == end_frame:
            result.speech_end_t = sent_t - ((k + 1) * FRAME_SAMPLES - end_sample) / PHONE_RATE
    heard_t = call.playout.first_audible_t
    if heard_t is not None and heard_t < result.speech_end_t:
        # before the prompt's last speech: the server ended the turn at a pause (or the last
        # answer resumed)
        result.premature_eot = True
        result.fail("error", "bot audio was heard while the caller was speaking (premature end "
                             "of turn, or the previous answer resumed after a pause longer "
                             "than --bot-quiet-s)")
        call.playout.start_turn()
    # what follows the end of speech is this turn's answer, also when it began in the prompt's
    # trailing silence (a fast answer: timed from the end of speech like any other)
    deadline = result.speech_end_t + config.turn_timeout_s
    while call.error is None:
        now = time.time()
        heard = call.playout.last_audible_end_t
        if (call.playout.first_audible_t is not None and heard is not None
                and now >= call.playout.playing_until(now) - 1e-3
                and now - heard >= config.bot_quiet_s):
            break
        if now > deadline:
            playout = call.playout
            missing = ("no audible bot audio" if playout.first_audible_t is None else
                       f"bot still speaking: {playout.samples_received / playout.sample_rate:.1f}"
                       f" s of audio received, {playout.playing_until(now) - now:.1f} s "
                       f"queued, last audible {now - (heard or now):.1f} s ago")
            result.fail("timeout", f"turn not over {config.turn_timeout_s:.0f} s after the "
                                   f"end of speech ({missing})")
            break
        await pacer.send(SILENCE)
    result.send_lag_ms = pacer.take_lag_s() * 1000.0
    result.first_frame_t = call.playout.first_frame_t
    result.first_audible_t = call.playout.first_audible_t
    result.last_frame_t = call.playout.last_frame_t
    result.last_audible_end_t = call.playout.last_audible_end_t
    if call.error is not None and result.status == "ok":
        result.fail("error", call.error)


async def run_twilio_session(config: BenchConfig, url: str, session: int,
                             prompts: Sequence[Prompt], concurrency: int,
                             on_turn: Callable[[TurnResult], None]) -> dict[str, Any] | None:
    results = [planned_turn(p, concurrency, session, i + 1) for i, p in enumerate(prompts)]
    reported = 0
    call_sid = "CA" + uuid.uuid4().hex
    info: dict[str, Any] = {"session": session, "call_sid": call_sid}
    reader: asyncio.Task | None = None
    call: _Call | None = None
    try:
        params: dict[str, str] = {}
        stream_url = url
        if urllib.parse.urlsplit(url).scheme in ("http", "https"):
            stream_url, params = await asyncio.to_thread(_post_webhook, config, url, call_sid)
        info["stream_url"] = stream_url
        async with connect(stream_url, open_timeout=config.connect_timeout_s, max_size=2**22,
                           ping_interval=None, **connect_kwargs()) as ws:
            call = _Call(ws, config.energy_threshold_db)
            await call.send("connected", protocol="Call", version="1.0.0")
            await call.send("start", start={
                "accountSid": "AC" + "0" * 32, "streamSid": call.stream_sid,
                "callSid": call_sid, "tracks": ["inbound"], "customParameters": params,
                "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": PHONE_RATE,
                                "channels": 1}})
            reader = asyncio.create_task(call.read())
            pacer = Pacer(call.send_media, FRAME_SAMPLES / PHONE_RATE)
            for prompt, result in zip(prompts, results, strict=True):
                await _run_turn(config, pacer, call, prompt, result)
                on_turn(result)
                reported += 1
                if call.error is not None:
                    raise RuntimeError(call.error)
                pause_until = time.time() + config.pause_s
                while time.time() < pause_until:
                    await pacer.send(SILENCE)
            await call.send("stop", stop={"accountSid": "AC" + "0" * 32, "callSid": call_sid})
    except Exception as exc:   # this call only; its turns are still counted
        message = str(exc) or type(exc).__name__
        for result in results[reported:]:
            result.fail("error", f"call ended early: {message}")
            on_turn(result)
    finally:
        if reader is not None:
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
        if call is not None:
            await call.cancel_marks()
    return info
