"""A whole phone call on loopback: simulated Twilio peer -> real server -> the shared pipeline.

Real parts: uvicorn + the telephony router, pipecat's Twilio serializer and FastAPI transport,
voice.pipeline.build_pipeline (Silero VAD, faster-whisper on the repo's random-weight tiny
Whisper fixture, the diffusion engine on a random-weight checkpoint, espeak-ng TTS).
The caller is simulated (tests/voice/telephony/twilio_peer.py): espeak-ng speech as 8 kHz mu-law
in real-time 20 ms frames, Twilio's playback buffer, mark echoes and clear.
What the bot says is gibberish (random weights); this test is about the call's plumbing.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from conftest import scaled
from fastapi import FastAPI
from twilio_peer import TwilioPeer, spoken_ulaw

from diffvoice.voice.telephony import signature
from diffvoice.voice.telephony.twilio import ActiveCalls, make_router

REPO = Path(__file__).resolve().parents[3]
TINY_WHISPER = REPO / "tests" / "assets" / "whisper-tiny-random"
TOKEN = "call-test-token"
CALL_SID = "CA" + "c" * 32


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("m") / "ckpt", family="sdar")
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=4, device="cpu"))
    eng.warmup()
    yield eng
    eng.close()


@pytest.fixture
def server_state(engine, tmp_path):
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    config = ServeConfig(
        model="random-sdar-checkpoint",
        device="cpu",
        asr=str(TINY_WHISPER),
        tts="espeak",
        stop_secs=0.3,
        max_new_tokens=48,
        latency_log=str(tmp_path / "latency.jsonl"),
        twilio_auth_token=TOKEN,
    )
    # sampled, like the other voice tests' random LLM (RANDOM_LLM): greedy decoding of random
    # weights can give an answer with no speakable text, depending on the (gibberish) transcript
    return AppState.create(config, engine, llm_overrides={"temperature": 1.0, "seed": 7})


async def wait_until(predicate, within_s: float, what: str, poll_s: float = 0.05) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(poll_s)


@pytest.mark.timeout(scaled(240))
async def test_call_answers_barges_in_and_tears_down(live_server, server_state, engine, tmp_path):
    question = spoken_ulaw("Hello, what time do you open tomorrow?", tmp_path / "q")
    barge_in = spoken_ulaw("Wait, stop, I have another question.", tmp_path / "b")
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(server_state, calls=calls))
    parameters = {
        "CallSid": CALL_SID,
        "From": "+15550100",
        "To": "+15550199",
        "token": signature.stream_token(TOKEN, CALL_SID, caller="+15550100"),
    }
    with live_server(app) as (_http, ws_base):
        url = ws_base + "/telephony/twilio/stream"
        async with TwilioPeer(url, call_sid=CALL_SID, stream_sid="MZ" + "d" * 32,
                              parameters=parameters) as peer:  # fmt: skip
            await wait_until(lambda: len(calls) == 1, scaled(15), "the call to start")
            await peer.dtmf("5")
            peer.say(question)
            first_media_t = await peer.wait_for("media", scaled(90))
            # Talk over the answer while it is still arriving.
            peer.say(barge_in)
            clear_t = await peer.wait_for("clear", scaled(60))
            media_before_clear = peer.received.media_bytes
            # docs/telephony.md: the bot's audio goes out in 20 ms media messages (160 bytes)
            sizes = peer.received.media_sizes
            assert max(sizes) == 160 and min(sizes) > 0, sorted(set(sizes))
            # Hang up while the engine is generating the answer to the barge-in.
            in_flight: set[str] = set()

            def generating() -> bool:
                in_flight.update(engine.active_request_ids())
                return bool(in_flight)

            await wait_until(generating, scaled(60), "the second answer to start", poll_s=0.01)
            await peer.stop()
            await wait_until(lambda: len(calls) == 0, scaled(30), "the pipeline to end")
            await wait_until(
                lambda: not engine.active_request_ids(), scaled(10), "engine requests to end"
            )
    assert calls.finished == 1
    assert not in_flight & engine.active_request_ids()
    assert clear_t > first_media_t
    # The answer came back as 8 kHz mu-law on this call's stream.
    assert media_before_clear >= 1600  # at least 0.2 s of audio before the barge-in
    assert peer.received.bad_stream_sid == 0
    assert peer.received.marks and peer.received.marks[0] == "dv-1-first"
    assert server_state.active_sessions == set()

    log_text = await asyncio.to_thread(Path(server_state.config.latency_log).read_text)
    lines = [json.loads(line) for line in log_text.splitlines()]
    turns = [r for r in lines if r.get("type") != "telephony.playout" and "turn" in r]
    playouts = [r for r in lines if r.get("type") == "telephony.playout"]
    assert turns and playouts
    first = next(p for p in playouts if p["turn"] == turns[0]["turn"])
    assert first["call_sid"] == CALL_SID
    assert first["playout"] == "heard"
    assert first["first_audio_heard_t"] >= first["first_chunk_written_t"]
    assert abs(first["first_chunk_written_t"] - first["first_audio_sent_t"]) < scaled(0.5)
    assert 0 < first["playout_ms"] < scaled(2000)
