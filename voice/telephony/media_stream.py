"""pipecat transport for one Twilio Media Stream: pipecat's serializer plus marks and ``stop``.

Contract
--------
:class:`CallSerializer` is pipecat's ``TwilioFrameSerializer`` (mu-law 8 kHz <-> PCM at the
pipeline's rates, ``media``/``dtmf`` in, ``media``/``clear`` out) plus the events pipecat 1.14
drops on the floor:

- ``mark`` echoes go to the call's :class:`~voice.telephony.playout.PlayoutTracker`;
- ``stop`` calls ``on_stop`` once (the caller hung up or the stream ended) and disables pipecat's
  REST hang-up for that call, since there is nothing left to hang up;
- a repeated ``connected``/``start`` and unknown events are ignored (logged at debug);
- a malformed message (not usable JSON, not an object, ``media`` not an object, a payload that
  is not base64, ``dtmf`` not an object) is skipped and logged, never ending the call by
  itself; the count is in ``malformed`` and past ``MAX_MALFORMED`` ``on_malformed_limit`` is
  called once (the router then closes that call with 1007 "malformed_messages");
- every valid ``media`` message calls ``on_media(audio_s)`` with its seconds of audio (the
  router's idle watchdog, which counts audio, not messages: an empty payload is 0 s);
- every message, whatever it is, counts against ``message_rate`` when one is set (the router
  sets it when the WebSocket protocol does not count frames itself:
  voice.transport.message_rate); past it ``on_message_flood`` is called once (the router then
  closes the stream 1008 ``message_rate``) and every later message is dropped unread;
- caller audio is admitted at the speed of speech (voice.ingest_limit, 8 kHz mu-law = 8000
  payload bytes a second): beyond ``audio_rate_limit`` x real time plus ``audio_burst_s`` a
  ``media`` message's audio is refused (never queued); once the caller is ahead of that rate by
  twice ``audio_burst_s`` (refused audio counted), ``on_too_fast`` is called once (an awaitable
  it returns is awaited before the next message is read) and every later ``media`` is refused.
  :class:`TwilioMediaStreamTransport` sets ``on_too_fast`` to close the stream with 1008
  ``audio_too_fast`` right there, in the input loop (the router then ends the call as for any
  closed socket). ``media_messages`` counts the valid media read, ``too_fast_after`` and
  ``too_fast_close_sent_after`` how many had been read when the limit said close and when the
  close was sent (equal: nothing is read in between). The limit is
  ``ingest_limit`` when given, else the serve config's when the app is ``diffvoice serve``'s
  (``app.state.diffvoice``), else the defaults (1.5x, 2 s);
- caller audio is decoded from the message already parsed (mu-law by table,
  voice.telephony.mulaw, then pipecat's own soxr stream resampler to the pipeline rate, at
  ``INPUT_RESAMPLER_QUALITY``: the quick one, which holds back no audio) instead
  of pipecat's deserialize, which parses every 20 ms message's JSON a second time (3-4% of the
  event loop's time with 16 Twilio callers).

Pipecat's auto hang-up (REST ``Status=completed`` when the pipeline ends on our side) is only
enabled when account SID, call SID and auth token are all known; otherwise it is off, because
pipecat would refuse to build the serializer.

:class:`TwilioMediaStreamTransport` is pipecat's ``FastAPIWebsocketTransport`` whose output
side also sends a ``mark`` after the first audio chunk of every bot speech run and at the end of
it, and tells the tracker about interruptions (pipecat's serializer turns the InterruptionFrame
into Twilio's ``clear``). When pipecat's output transport gives up on a write (one that took
over its ``audio_out_write_timeout_secs``, e.g. after an event-loop stall) it marks itself
unusable and never writes again; the transport then calls ``on_output_stalled`` once (the
router closes the call 1013 ``output_stalled``: never a call that stays up without audio).
It relies on two pipecat 1.14 internals: the transport's ``_output`` attribute, replaced after
construction, and the output transport's ``_client``.

No FastAPI routing, signature checks or latency logging here.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable

from pipecat.audio.resamplers.soxr_stream_resampler import SOXRStreamAudioResampler
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    CancelFrame,
    EndFrame,
    Frame,
    InputAudioRawFrame,
    InterruptionFrame,
    OutputAudioRawFrame,
    TTSStartedFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.serializers.twilio import TwilioFrameSerializer
from pipecat.transports.websocket.fastapi import (
    FastAPIWebsocketInputTransport,
    FastAPIWebsocketOutputTransport,
    FastAPIWebsocketParams,
    FastAPIWebsocketTransport,
)

from diffvoice.voice.ingest_limit import ACCEPT, CLOSE, CLOSE_REASON, IngestLimit, mulaw_seconds
from diffvoice.voice.json_input import JSONInputError, loads_untrusted
from diffvoice.voice.telephony import mulaw
from diffvoice.voice.telephony.playout import PlayoutTracker
from diffvoice.voice.transport.message_rate import MessageRate
from diffvoice.voice.transport.stale_audio import StaleAudioGuard
from diffvoice.voice.transport.vad_aligned import VadAlignedInput

logger = logging.getLogger(__name__)

TWILIO_SAMPLE_RATE = 8000
# The caller's 8 -> 16 kHz stream resampler. pipecat's default (soxr "VHQ") holds back 63 ms of
# a call's audio at the median and up to 110 ms (its long filter releases ~95 ms blocks every
# 4-5 media messages): the VAD hears the caller stop that much later on every turn. "QQ"
# (quick cubic) holds back nothing; the phone band has nothing above 4 kHz for a sharper filter
# to keep. Measured: python -m diffvoice.latency_bench.phone_resampler (docs/latency/turn-taking.md)
INPUT_RESAMPLER_QUALITY = "QQ"
CLOSE_POLICY_VIOLATION = 1008  # audio_too_fast
MAX_MALFORMED = 50  # malformed messages one call may send before it is closed (1007)
MAX_MEDIA_PAYLOAD_CHARS = 64 * 1024  # base64; Twilio sends 20 ms = 160 bytes = 216 chars


class CallSerializer(TwilioFrameSerializer):
    """TwilioFrameSerializer that also understands ``mark`` and ``stop``."""

    def __init__(
        self,
        *,
        stream_sid: str,
        call_sid: str,
        tracker: PlayoutTracker,
        on_stop: Callable[[], None],
        account_sid: str | None = None,
        auth_token: str | None = None,
        rest_base_url: str | None = None,
        ingest_limit: IngestLimit | None = None,
        resampler_quality: str = INPUT_RESAMPLER_QUALITY,
    ):
        auto_hang_up = bool(account_sid and call_sid and auth_token)
        super().__init__(
            stream_sid,
            call_sid=call_sid,
            account_sid=account_sid if auto_hang_up else None,
            auth_token=auth_token if auto_hang_up else None,
            base_url=rest_base_url,
            params=TwilioFrameSerializer.InputParams(
                twilio_sample_rate=TWILIO_SAMPLE_RATE, auto_hang_up=auto_hang_up,
                # a media stream is continuous: pipecat's default (reset the resampler after
                # 0.2 s without audio) re-primed the 8->16 kHz filter whenever a busy server
                # read a call's frames late (0.23 vs 0.02 ms a frame), and cut its history
                resampler_clear_after_secs=None,
            ),
        )
        self._input_resampler = SOXRStreamAudioResampler(quality=resampler_quality,
                                                         clear_after_secs=None)
        self.stream_sid = stream_sid
        self.call_sid = call_sid
        self.auto_hang_up = auto_hang_up
        self.stopped = False
        self._tracker = tracker
        self._on_stop = on_stop
        self.on_media: Callable[[], None] | None = None  # every valid media message
        self.on_malformed_limit: Callable[[], None] | None = None  # once, past MAX_MALFORMED
        self.malformed = 0
        self.malformed_limit_hit = False
        self.ingest_limit = ingest_limit  # None: TwilioMediaStreamTransport picks one
        # once, past the ingest limit; awaited before the next message is read when it returns
        # an awaitable (TwilioMediaStreamTransport's sends the close)
        self.on_too_fast: Callable[[], Awaitable[None] | None] | None = None
        self.too_fast = False
        self.media_messages = 0  # valid media messages read
        self.too_fast_after: int | None = None  # media_messages when the limit said CLOSE
        self.too_fast_close_sent_after: int | None = None  # media_messages when the close went
        self.message_rate: MessageRate | None = None  # None: the WebSocket protocol counts
        self.on_message_flood: Callable[[], None] | None = None  # once, past message_rate
        self.flooded = False

    async def serialize(self, frame: Frame) -> str | bytes | None:
        if self.stopped and isinstance(frame, (EndFrame, CancelFrame)):
            # The call is already over: no REST hang-up, nothing to send.
            return None
        return await super().serialize(frame)

    def _malformed(self, why: str) -> None:
        """Skip one bad message: log it (the first few, then every 100th), count it, and past
        MAX_MALFORMED tell the call (on_malformed_limit) so it can close with a reason."""
        self.malformed += 1
        if self.malformed <= 5 or self.malformed % 100 == 0:
            logger.warning("twilio %s: ignoring a malformed message #%d: %s", self.call_sid,
                           self.malformed, why)
        if self.malformed > MAX_MALFORMED and not self.malformed_limit_hit:
            self.malformed_limit_hit = True
            if self.on_malformed_limit is not None:
                self.on_malformed_limit()

    async def _admit(self, nbytes: int) -> bool:
        """Whether `nbytes` of caller mu-law go on to the pipeline (voice.ingest_limit). The
        message that crosses the limit awaits `on_too_fast` (the close) before returning, so no
        further message is read before the caller is told."""
        if self.ingest_limit is None:
            self.ingest_limit = IngestLimit()
        verdict = self.ingest_limit.admit(mulaw_seconds(nbytes, TWILIO_SAMPLE_RATE))
        if verdict == CLOSE and not self.too_fast:
            self.too_fast = True
            self.too_fast_after = self.media_messages
            logger.warning("twilio %s: caller audio faster than %gx real time (+%g s) after %d "
                           "media messages: %.1f s refused, closing", self.call_sid,
                           self.ingest_limit.rate, self.ingest_limit.burst_s, self.media_messages,
                           self.ingest_limit.refused_s)
            if self.on_too_fast is not None:
                closing = self.on_too_fast()
                if inspect.isawaitable(closing):
                    await closing
        return verdict == ACCEPT

    def _check(self, message) -> str | None:
        """Why a decoded message cannot be used, or None."""
        if not isinstance(message, dict):
            return f"a JSON {type(message).__name__}, not an object"
        event = message.get("event")
        if not isinstance(event, str):
            return "no string 'event'"
        if event == "media":
            media = message.get("media")
            if not isinstance(media, dict):
                return "'media' is not an object"
            payload = media.get("payload")
            if not isinstance(payload, str) or len(payload) > MAX_MEDIA_PAYLOAD_CHARS:
                return f"'media.payload' is not a string of <= {MAX_MEDIA_PAYLOAD_CHARS} chars"
            try:
                base64.b64decode(payload, validate=True)
            except (binascii.Error, ValueError):
                return "'media.payload' is not base64"
        elif event == "dtmf" and not isinstance(message.get("dtmf"), dict):
            return "'dtmf' is not an object"
        return None

    def _flooded(self) -> bool:
        """Count one message; True (and on_message_flood called once) past the rate."""
        if self.message_rate is None or self.message_rate.admit():
            return False
        if not self.flooded:
            self.flooded = True
            logger.warning("twilio %s: closing: %s", self.call_sid, self.message_rate.describe())
            if self.on_message_flood is not None:
                self.on_message_flood()
        return True

    async def deserialize(self, data: str | bytes) -> Frame | None:
        if self._flooded():
            return None
        now = time.time()
        self._tracker.expire(now)
        try:
            message = loads_untrusted(data)
        except JSONInputError as e:  # not JSON, huge ints, deep nesting, lone surrogates
            self._malformed(str(e))
            return None
        problem = self._check(message)
        if problem is not None:
            self._malformed(problem)
            return None
        event = message.get("event")
        if event == "media":  # what pipecat's deserialize does, without parsing the JSON again
            ulaw = base64.b64decode(message["media"]["payload"])
            self.media_messages += 1
            if self.on_media is not None:
                self.on_media(mulaw_seconds(len(ulaw), TWILIO_SAMPLE_RATE))
            if not await self._admit(len(ulaw)):
                return None
            pcm = mulaw.decode_fast(ulaw).tobytes()
            pcm = await self._input_resampler.resample(pcm, TWILIO_SAMPLE_RATE, self._sample_rate)
            if not pcm:
                return None
            return InputAudioRawFrame(audio=pcm, num_channels=1, sample_rate=self._sample_rate)
        if event == "mark":
            mark = message.get("mark")
            name = mark.get("name") if isinstance(mark, dict) else None
            if isinstance(name, str):
                self._tracker.mark_echoed(name, now)
            return None
        if event == "stop":
            if not self.stopped:
                self.stopped = True
                logger.info("twilio %s: stream stopped by Twilio", self.call_sid)
                self._on_stop()
            return None
        if event in ("connected", "start"):
            logger.debug("twilio %s: ignoring a repeated %r", self.call_sid, event)
            return None
        if event is not None and event not in ("media", "dtmf"):
            logger.debug("twilio %s: ignoring unknown event %r", self.call_sid, event)
            return None
        return await super().deserialize(data)


class _MarkingOutputTransport(FastAPIWebsocketOutputTransport):
    """Sends Twilio marks around each bot speech run; reports clears to the tracker."""

    def __init__(self, *args, stream_sid: str, tracker: PlayoutTracker, **kwargs):
        super().__init__(*args, **kwargs)
        self._stream_sid = stream_sid
        self._tracker = tracker
        self._first_chunk_pending = False
        self._run_open = False
        self.stale = StaleAudioGuard()
        self.on_output_stalled: Callable[[], None] | None = None  # once, when writes give up

    async def set_usable(self, is_usable: bool):
        was_usable = self.is_usable
        await super().set_usable(is_usable)
        if was_usable and not is_usable and self.on_output_stalled is not None:
            self.on_output_stalled()

    async def _send_mark(self, name: str) -> None:
        message = {"event": "mark", "streamSid": self._stream_sid, "mark": {"name": name}}
        await self._client.send(json.dumps(message))

    async def push_frame(self, frame: Frame, direction: FrameDirection = FrameDirection.DOWNSTREAM):
        # The media sender announces speech runs by pushing these frames from this processor.
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, BotStartedSpeakingFrame):
                self._first_chunk_pending = True
            elif isinstance(frame, BotStoppedSpeakingFrame) and self._run_open:
                self._run_open = False
                await self._send_mark(self._tracker.speech_stopped(time.time()))
        await super().push_frame(frame, direction)

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        if isinstance(frame, TTSStartedFrame):
            self.stale.started(frame)  # the next answer's audio follows this frame
        elif isinstance(frame, OutputAudioRawFrame) and self.stale.drops(frame):
            return  # the interrupted answer's audio, arriving after the interruption
        if isinstance(frame, InterruptionFrame):
            self.stale.interrupted(frame)  # before pipecat pushes it on (and 'clear' goes out)
            self._tracker.interrupted(time.time())
            self._run_open = False
            self._first_chunk_pending = False
        await super().process_frame(frame, direction)

    async def write_audio_frame(self, frame: OutputAudioRawFrame) -> bool:
        if self.stale.is_stale(frame):
            return True  # the interrupted answer: never sent after Twilio's 'clear'
        pending = self._first_chunk_pending
        self._first_chunk_pending = False
        write_t = time.time()
        written = await super().write_audio_frame(frame)
        if written and pending:
            self._run_open = True
            await self._send_mark(self._tracker.speech_started(write_t))
        return written


class _VadAlignedInputTransport(VadAlignedInput, FastAPIWebsocketInputTransport):
    """Twilio's 20 ms media frames reach the pipeline as whole 32 ms VAD windows."""


def _serve_config(websocket):
    """`diffvoice serve`'s ServeConfig (voice.server.create_app sets app.state.diffvoice), or
    None for an app without one."""
    app = getattr(websocket, "scope", {}).get("app")
    state = getattr(getattr(app, "state", None), "diffvoice", None)
    return getattr(state, "config", None)


class TwilioMediaStreamTransport(FastAPIWebsocketTransport):
    """FastAPIWebsocketTransport for one Twilio call, with mark-based playout tracking."""

    def __init__(self, websocket, *, serializer: CallSerializer, tracker: PlayoutTracker):
        params = FastAPIWebsocketParams(
            audio_in_enabled=True,
            audio_out_enabled=True,
            add_wav_header=False,
            serializer=serializer,
            # 20 ms output chunks: Twilio's own packet size, and a finer-grained clear.
            audio_out_10ms_chunks=2,
            # Twilio sends no Origin header; the stream is authenticated by its start token.
            allowed_origins=[],
        )
        super().__init__(websocket, params)
        if serializer.ingest_limit is None:
            serializer.ingest_limit = IngestLimit.from_config(_serve_config(websocket))
        serializer.on_too_fast = lambda: self._close_too_fast(websocket, serializer)
        self._input = _VadAlignedInputTransport(
            self, self._client, self._params, name=self._input_name
        )
        self._output = _MarkingOutputTransport(
            self,
            self._client,
            self._params,
            name=self._output_name,
            stream_sid=serializer.stream_sid,
            tracker=tracker,
        )

    @staticmethod
    async def _close_too_fast(websocket, serializer: CallSerializer) -> None:
        """Awaited by the serializer on the message that crossed the limit, before it reads
        another: the close goes out at once. A close in a task of its own waited until the input
        loop had drained what was already read, and a flooding caller kept sending meanwhile."""
        with contextlib.suppress(Exception):  # already closed: nothing to do
            await websocket.close(code=CLOSE_POLICY_VIOLATION, reason=CLOSE_REASON)
        serializer.too_fast_close_sent_after = serializer.media_messages
