"""A minimal browser-protocol client for tests (what web/ does, minus the microphone)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field

import websockets

from diffvoice.voice.transport import protocol

CHUNK_BYTES = 640  # 20 ms at 16 kHz


@dataclass
class Call:
    events: list[protocol.Event] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    audio_frames: int = 0
    close_code: int | None = None
    close_reason: str = ""
    started: protocol.SessionStarted | None = None
    first_audio_t: float | None = None
    event_times: list[float] = field(default_factory=list)

    def of(self, kind: type) -> list:
        return [e for e in self.events if isinstance(e, kind)]

    def has(self, kind: type) -> bool:
        return bool(self.of(kind))


async def _reader(ws, call: Call, done: asyncio.Event, until) -> None:
    try:
        async for message in ws:
            now = time.time()
            if isinstance(message, bytes):
                call.audio.extend(message)
                call.audio_frames += 1
                if call.first_audio_t is None:
                    call.first_audio_t = now
            else:
                event = protocol.decode_server(message)
                call.events.append(event)
                call.event_times.append(now)
                if isinstance(event, protocol.SessionStarted):
                    call.started = event
            if until(call):
                done.set()
    except websockets.ConnectionClosed:
        pass
    finally:
        call.close_code = ws.close_code
        call.close_reason = ws.close_reason or ""
        done.set()


async def send_pcm(ws, pcm: bytes, *, speed: float = 1.5) -> None:
    """Send PCM in 20 ms frames, `speed` times faster than real time (at most the server's
    default audio rate limit, 1.5x: a faster client loses audio past its 2 s burst,
    voice/ingest_limit.py)."""
    for offset in range(0, len(pcm), CHUNK_BYTES):
        await ws.send(pcm[offset : offset + CHUNK_BYTES])
        await asyncio.sleep(0.02 / speed)


@contextlib.asynccontextmanager
async def connect(url: str, *, config: dict | None = None, until=lambda call: False):
    """Open a call; yields (ws, call, done) where `done` is set when `until(call)` holds or
    the server closes the socket."""
    call = Call()
    done = asyncio.Event()
    async with websockets.connect(url, max_size=None) as ws:
        if config is not None:
            await ws.send(protocol.SessionStart(config=config).encode())
        reader = asyncio.create_task(_reader(ws, call, done, until))
        try:
            yield ws, call, done
        finally:
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
