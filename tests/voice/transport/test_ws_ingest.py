"""Issue 39, item 4 on the real server (create_app on loopback): caller audio is taken at the
speed of speech. A client flooding 64 KiB frames is closed 1008 `audio_too_fast` after a bounded
amount of audio (before the fix: 11.9 h of audio accepted in 10 s, never closed); a client
sending in real time, even in half-second bursts, is never refused, nor is the audio it sent
while the server was still setting its call up."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest
import websockets
from voice_fixtures import LiveServer, scaled

from diffvoice.voice.transport import protocol

FRAME_64K = b"\x01\x00" * (1 << 15)  # 65 536 bytes = 2.048 s of 16 kHz int16
MAX_FLOOD_FRAMES = 300  # 614 s of audio: the flood must be closed long before


@pytest.fixture(scope="module")
def server(voice_state):
    config = voice_state.config.replace(idle_timeout_s=30.0)
    state = dataclasses.replace(voice_state, config=config, active_sessions=set(),
                                client_slots=None, session_tokens=None)
    with LiveServer(state) as live:
        yield live


async def _started(ws) -> None:
    await ws.send(protocol.SessionStart(config={}).encode())
    async with asyncio.timeout(scaled(30)):
        while True:
            message = await ws.recv()
            if isinstance(message, str) and isinstance(
                    protocol.decode_server(message), protocol.SessionStarted):
                return


async def _errors_until_close(ws, within_s: float) -> list[str]:
    errors = []
    try:
        async with asyncio.timeout(scaled(within_s)):
            async for message in ws:
                if isinstance(message, str):
                    event = protocol.decode_server(message)
                    if isinstance(event, protocol.Error):
                        errors.append(event.code)
    except websockets.ConnectionClosed:
        pass
    return errors


async def test_flood_of_64k_frames_is_closed_audio_too_fast(server):
    async with websockets.connect(server.ws_url, max_size=None, ping_interval=None) as ws:
        await _started(ws)
        sent = 0
        try:
            while sent < MAX_FLOOD_FRAMES:
                await ws.send(FRAME_64K)
                sent += 1
                await asyncio.sleep(0)  # let the client see a close that arrived
        except websockets.ConnectionClosed:
            pass
        errors = await _errors_until_close(ws, within_s=10)
        assert (ws.close_code, ws.close_reason) == (1008, "audio_too_fast"), (sent, errors)
        assert errors == ["audio_too_fast"]
    # closed while the client was still sending (at most ~100 s of audio), not after all of it
    assert sent < 50  # the server closes after 2 frames; the close takes a few to be seen


async def test_real_time_client_in_bursts_is_never_refused(server):
    """6 s of audio in 20 ms frames, sent as 0.5 s bursts every 0.5 s (a jittery network)."""
    frame_20ms = b"\x01\x00" * 320
    async with websockets.connect(server.ws_url, max_size=None, ping_interval=None) as ws:
        await _started(ws)
        t0 = time.monotonic()
        for burst in range(12):
            await asyncio.sleep(max(0.0, t0 + burst * 0.5 - time.monotonic()))
            for _ in range(25):
                await ws.send(frame_20ms)
        await ws.send(protocol.Ping().encode())
        async with asyncio.timeout(scaled(20)):
            while True:  # still open: the pong comes back, no error before it
                message = await ws.recv()
                if isinstance(message, bytes):
                    continue  # bot audio
                event = protocol.decode_server(message)
                assert not isinstance(event, protocol.Error), event
                if isinstance(event, protocol.Pong):
                    break
        assert ws.close_code is None


@pytest.mark.parametrize("credit_held", [True, False], ids=["held-credited", "ablation"])
async def test_audio_sent_while_the_call_is_set_up_is_all_taken(server, monkeypatch, credit_held):
    """The client streams in real time from its first message, not waiting for session.started
    (as tests/voice/scale/test_ray_serve.py's callers do); the server takes 4 s to build the
    pipeline (here: a sleep that blocks its event loop, as a loaded server does), so 4 s of
    audio waits unread. All of it is taken; without the credit for the held time (ablation) the
    bucket refused what was beyond its 2 s, the caller's first words."""
    from diffvoice.voice import call
    from diffvoice.voice.transport import ws_session

    limits, build = [], call.build_pipeline

    class Recorded(ws_session.IngestLimit):
        def __post_init__(self) -> None:
            super().__post_init__()
            limits.append(self)
            if not credit_held:
                self._reading = True  # no credit for the time before the first frame

    def slow_build(*args, **kwargs):
        time.sleep(4.0)
        return build(*args, **kwargs)

    monkeypatch.setattr(ws_session, "IngestLimit", Recorded)
    monkeypatch.setattr(call, "build_pipeline", slow_build)
    frame_20ms = b"\x01\x00" * 320
    async with websockets.connect(server.ws_url, max_size=None, ping_interval=None) as ws:
        await ws.send(protocol.SessionStart(config={}).encode())
        t0 = time.monotonic()
        for i in range(300):  # 6 s in real time, from the first message on
            await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
            await ws.send(frame_20ms)
        await ws.send(protocol.Ping().encode())
        async with asyncio.timeout(scaled(20)):
            while True:
                message = await ws.recv()
                if isinstance(message, str) and isinstance(protocol.decode_server(message),
                                                           protocol.Pong):  # fmt: skip
                    break
    limit = limits[-1]  # the one made when setup started
    if credit_held:
        assert limit.refused_s == 0.0
    else:
        assert limit.refused_s > 0.5  # what the credit is for: ~2 s of the 4 s held
