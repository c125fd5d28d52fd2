"""The Twilio transport over a real loopback server, with a small scripted pipeline.

The pipeline here is transport.input() -> Scripted -> transport.output(): Scripted answers a
DTMF "1" with 1.5 s of tone (as TTS audio) and a DTMF "2" with an interruption. That isolates
what this package adds to pipecat (handshake, token, mu-law both ways, marks, clear, stop,
teardown) from ASR/LLM timing; tests/voice/telephony/test_twilio_call.py runs the real pipeline.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import numpy as np
import pytest
import websockets
from conftest import scaled
from fastapi import FastAPI
from pipecat.frames.frames import (
    InputAudioRawFrame,
    InputDTMFFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor
from twilio_peer import TwilioPeer, spoken_ulaw

from diffvoice.voice.telephony import signature
from diffvoice.voice.telephony.twilio import ActiveCalls, make_router

TOKEN = "transport-test-token"
RATE = 16000


class Scripted(FrameProcessor):
    def __init__(self, seen: dict):
        super().__init__()
        self.seen = seen

    async def process_frame(self, frame, direction):
        await super().process_frame(frame, direction)
        if isinstance(frame, InputAudioRawFrame):
            samples = np.frombuffer(frame.audio, dtype=np.int16)
            self.seen["rates"].add(frame.sample_rate)
            self.seen["peak"] = max(self.seen["peak"], int(np.abs(samples).max(initial=0)))
            return
        if isinstance(frame, InputDTMFFrame):
            self.seen["digits"].append(frame.button.value)
            if frame.button.value == "1":
                t = np.arange(int(1.5 * RATE)) / RATE
                tone = (8000 * np.sin(2 * np.pi * 440 * t)).astype(np.int16).tobytes()
                await self.push_frame(TTSStartedFrame())
                for i in range(0, len(tone), 3200):
                    await self.push_frame(TTSAudioRawFrame(tone[i : i + 3200], RATE, 1))
                await self.push_frame(TTSStoppedFrame())
            elif frame.button.value == "2":
                await self.broadcast_interruption()
            return
        await self.push_frame(frame, direction)


@pytest.fixture
def app_and_seen(tmp_path):
    seen = {"rates": set(), "peak": 0, "digits": [], "workers": []}
    calls = ActiveCalls()

    def build(state, transport, *, session_id, on_latency=None, audio_out_sample_rate=RATE, **_):
        pipeline = Pipeline([transport.input(), Scripted(seen), transport.output()])
        # the output rate the server asks for (8 kHz), as voice.pipeline.build_pipeline uses it
        params = PipelineParams(audio_in_sample_rate=RATE,
                                audio_out_sample_rate=audio_out_sample_rate)
        worker = PipelineWorker(pipeline, params=params, enable_rtvi=False)
        seen["workers"].append(worker)
        seen["on_latency"] = on_latency
        return pipeline, worker

    config = SimpleNamespace(
        public_url=None, twilio_auth_token=TOKEN, twilio_validate=True,
        latency_log=str(tmp_path / "log.jsonl"),
    )  # fmt: skip
    app = FastAPI()
    app.include_router(
        make_router(SimpleNamespace(config=config), calls=calls, build_pipeline=build)
    )
    return app, seen, calls


def peer(ws_base: str, call_sid: str, token: str | None) -> TwilioPeer:
    params = {"CallSid": call_sid, "From": "+15550100", "To": "+15550199"}
    if token:
        params["token"] = token
    return TwilioPeer(
        ws_base + "/telephony/twilio/stream", call_sid=call_sid, stream_sid="MZ" + call_sid[2:],
        parameters=params,
    )  # fmt: skip


async def wait_until(predicate, within_s: float) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


async def test_media_marks_clear_and_stop(live_server, app_and_seen, tmp_path):
    app, seen, calls = app_and_seen
    speech = spoken_ulaw("hello there", tmp_path / "hello")
    call_sid = "CA" + "a" * 32
    with live_server(app) as (_http, ws_base):
        async with peer(ws_base, call_sid, signature.stream_token(TOKEN, call_sid,
                                                                caller="+15550100")) as p:
            p.say(speech)
            await wait_until(lambda: len(calls) == 1, scaled(10))
            await p.dtmf("1")
            await p.wait_for("media", scaled(10))
            await p.wait_for("mark", scaled(5))
            # Let the whole answer go out; the end-of-run mark follows it.
            await wait_until(lambda: any(m.endswith("-end") for m in p.received.marks), scaled(10))
            answered = p.received.media_bytes
            # docs/telephony.md: bot audio goes out in 20 ms media messages (160 mu-law bytes)
            sizes = p.received.media_sizes
            assert sizes and max(sizes) == 160 and all(0 < n <= 160 for n in sizes), (
                sorted(set(sizes)))
            # A bogus stream opened mid-call is closed with a reason; this call carries on.
            async with websockets.connect(ws_base + "/telephony/twilio/stream") as bogus:
                await bogus.send("garbage")
                with pytest.raises(websockets.ConnectionClosed) as closed:
                    await asyncio.wait_for(bogus.recv(), scaled(10))
            assert closed.value.rcvd.code == 1007 and len(calls) == 1
            await p.dtmf("1")
            await p.wait_for("media", scaled(10))
            # the second answer's first-chunk mark is echoed before we talk over it
            await wait_until(lambda: "dv-2-first" in p.received.marks, scaled(10))
            await p.dtmf("2")
            await p.wait_for("clear", scaled(10))
            await p.stop()
            await wait_until(lambda: len(calls) == 0, scaled(15))
    worker = seen["workers"][0]
    assert worker.has_finished()
    assert calls.finished == 1
    # 1.5 s of tone came back as 8 kHz mu-law (~12000 bytes, give or take a padded chunk).
    assert 11000 <= answered <= 13500
    assert p.received.bad_stream_sid == 0
    # Caller speech arrived as loud 16 kHz PCM, and both keys went through.
    assert seen["rates"] == {RATE} and seen["peak"] > 3000
    assert seen["digits"] == ["1", "1", "2"]
    marks = p.received.marks
    assert marks[:2] == ["dv-1-first", "dv-1-end"] and "dv-2-first" in marks


@pytest.mark.parametrize(
    ("first", "code"),
    [("garbage", 1007), ('{"event": "media"}', 1008), ("no-token", 1008)],
)
async def test_bad_opening_is_closed_with_a_reason(live_server, app_and_seen, first, code):
    app, seen, calls = app_and_seen
    with live_server(app) as (_http, ws_base):
        url = ws_base + "/telephony/twilio/stream"
        if first == "no-token":
            async with peer(ws_base, "CA" + "b" * 32, token="0" * 64) as p:
                await asyncio.wait_for(p.events.get(), scaled(10))
            got_code, reason = p.close_code, "token"
        else:
            async with websockets.connect(url) as ws:
                await ws.send(first)
                with pytest.raises(websockets.ConnectionClosed) as info:
                    await asyncio.wait_for(ws.recv(), scaled(10))
            got_code, reason = info.value.rcvd.code, info.value.rcvd.reason
    assert got_code == code
    assert reason
    assert seen["workers"] == [] and len(calls) == 0
