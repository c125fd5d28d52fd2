"""A simulated Twilio Media Streams peer for loopback tests.

It speaks the documented protocol (connected, start, 20 ms mu-law ``media`` frames paced in real
time, ``dtmf``, ``stop``) and behaves like Twilio's playback buffer: audio we receive is
"played" in real time, a ``mark`` is echoed once the audio queued before it has played, and a
``clear`` empties the buffer and echoes every outstanding mark at once.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import websockets

FRAME_BYTES = 160  # 20 ms of 8 kHz mu-law
FRAME_S = 0.02
ULAW_SILENCE = b"\xff"


def spoken_ulaw(text: str, path: Path, *, speed_wpm: int = 150) -> bytes:
    """Speech from espeak-ng, as raw 8 kHz mono mu-law (what Twilio sends)."""
    wav = path.with_suffix(".wav")
    subprocess.run(["espeak-ng", "-s", str(speed_wpm), "-w", str(wav), text], check=True)
    raw = path.with_suffix(".ulaw")
    subprocess.run(
        ["sox", str(wav), "-r", "8000", "-c", "1", "-e", "mu-law", "-t", "raw", str(raw)],
        check=True,
    )
    return raw.read_bytes()


@dataclass
class Received:
    media_bytes: int = 0
    media_messages: int = 0
    media_sizes: list[int] = field(default_factory=list)  # payload bytes of each media message
    first_media_t: float | None = None
    clears: list[float] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    other: list[dict] = field(default_factory=list)
    bad_stream_sid: int = 0


class TwilioPeer:
    def __init__(self, url: str, *, call_sid: str, stream_sid: str, parameters: dict[str, str]):
        self.url = url
        self.call_sid = call_sid
        self.stream_sid = stream_sid
        self.parameters = parameters
        self.received = Received()
        self.events = asyncio.Queue()  # ("media" | "clear" | "mark", t)
        self._ws = None
        self._outgoing = bytearray()  # caller audio waiting to be sent
        self._sequence = 0
        self._chunk = 0
        self._play_until = 0.0
        self._pending_marks: list[tuple[float, str]] = []
        self._tasks: list[asyncio.Task] = []
        self.close_code: int | None = None

    async def __aenter__(self):
        self._ws = await websockets.connect(self.url, max_size=None)
        await self._send({"event": "connected", "protocol": "Call", "version": "1.0.0"})
        await self._send(
            {
                "event": "start",
                "streamSid": self.stream_sid,
                "start": {
                    "accountSid": "AC" + "0" * 32,
                    "streamSid": self.stream_sid,
                    "callSid": self.call_sid,
                    "tracks": ["inbound"],
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                    "customParameters": self.parameters,
                },
            }
        )
        self._tasks = [asyncio.create_task(self._sender()), asyncio.create_task(self._reader())]
        return self

    async def __aexit__(self, *exc):
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._ws.close()

    async def _send(self, message: dict) -> None:
        self._sequence += 1
        if message["event"] != "connected":
            message = {**message, "sequenceNumber": str(self._sequence)}
        await self._ws.send(json.dumps(message))

    def say(self, ulaw: bytes) -> None:
        """Queue caller speech; silence is sent whenever nothing is queued."""
        self._outgoing.extend(ulaw)

    async def dtmf(self, digit: str) -> None:
        await self._send(
            {"event": "dtmf", "streamSid": self.stream_sid,
             "dtmf": {"track": "inbound_track", "digit": digit}}
        )  # fmt: skip

    async def stop(self) -> None:
        for task in self._tasks[:1]:
            task.cancel()
        await self._send(
            {"event": "stop", "streamSid": self.stream_sid,
             "stop": {"accountSid": "AC" + "0" * 32, "callSid": self.call_sid}}
        )  # fmt: skip
        await self._ws.close()

    @property
    def speaking(self) -> bool:
        return len(self._outgoing) > 0

    async def _sender(self) -> None:
        start = time.monotonic()
        while True:
            frame = bytes(self._outgoing[:FRAME_BYTES])
            del self._outgoing[:FRAME_BYTES]
            frame += ULAW_SILENCE * (FRAME_BYTES - len(frame))
            self._chunk += 1
            await self._send(
                {
                    "event": "media",
                    "streamSid": self.stream_sid,
                    "media": {
                        "track": "inbound",
                        "chunk": str(self._chunk),
                        "timestamp": str(self._chunk * 20),
                        "payload": base64.b64encode(frame).decode(),
                    },
                }
            )
            await self._echo_due_marks()
            # Real-time pacing on an absolute clock, so scheduling hiccups do not accumulate.
            await asyncio.sleep(max(0.0, start + self._chunk * FRAME_S - time.monotonic()))

    async def _echo_due_marks(self, everything: bool = False) -> None:
        now = time.monotonic()
        due = [m for m in self._pending_marks if everything or m[0] <= now]
        self._pending_marks = [m for m in self._pending_marks if m not in due]
        for _, name in due:
            await self._send(
                {"event": "mark", "streamSid": self.stream_sid, "mark": {"name": name}}
            )

    async def _reader(self) -> None:
        try:
            async for raw in self._ws:
                message = json.loads(raw)
                now = time.monotonic()
                if message.get("streamSid") != self.stream_sid:
                    self.received.bad_stream_sid += 1
                event = message.get("event")
                if event == "media":
                    audio = base64.b64decode(message["media"]["payload"])
                    self.received.media_bytes += len(audio)
                    self.received.media_messages += 1
                    self.received.media_sizes.append(len(audio))
                    if self.received.first_media_t is None:
                        self.received.first_media_t = time.time()
                    # Twilio plays what it gets in real time after what is already queued.
                    self._play_until = max(self._play_until, now) + len(audio) / 8000
                elif event == "mark":
                    self.received.marks.append(message["mark"]["name"])
                    self._pending_marks.append(
                        (max(self._play_until, now), message["mark"]["name"])
                    )
                elif event == "clear":
                    self.received.clears.append(time.time())
                    self._play_until = now
                    await self._echo_due_marks(everything=True)
                else:
                    self.received.other.append(message)
                await self.events.put((event, time.time()))
        except websockets.ConnectionClosed as e:
            self.close_code = e.rcvd.code if e.rcvd else None
        finally:
            await self.events.put(("closed", time.time()))

    async def wait_for(self, event: str, within_s: float) -> float:
        deadline = time.monotonic() + within_s
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no {event!r} from the server within {within_s:.0f} s")
            got, t = await asyncio.wait_for(self.events.get(), remaining)
            if got == event:
                return t
            if got == "closed":
                raise ConnectionError(f"server closed the stream while waiting for {event!r}")
