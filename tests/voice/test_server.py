"""The real voice server on loopback: spoken audio in, transcript + bot text + bot audio out,
two sessions at once; malformed input closes only the offending session."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest
from voice_client import connect, send_pcm
from voice_fixtures import scaled

from diffvoice.voice.transport import protocol


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read()


def _turn_done(call) -> bool:
    return call.has(protocol.Latency) and call.audio_frames > 0 and call.has(protocol.BotText)


async def _one_call(server, pcm: bytes, stop_secs: float):
    async with connect(server.ws_url, config={"stop_secs": stop_secs}, until=_turn_done) as (
        ws,
        call,
        done,
    ):
        await send_pcm(ws, pcm)
        await asyncio.wait_for(done.wait(), scaled(60))
    return call


async def test_two_concurrent_spoken_calls(live_server, speech):
    a_pcm = speech("hello, can you tell me the opening hours")
    b_pcm = speech("how much does a haircut cost")
    a, b = await asyncio.gather(
        _one_call(live_server, a_pcm, 0.4), _one_call(live_server, b_pcm, 0.6)
    )
    for call, stop_secs in ((a, 0.4), (b, 0.6)):
        assert call.started is not None
        assert call.started.output_sample_rate == live_server.state.tts.sample_rate
        assert call.started.stop_secs == stop_secs
        assert call.started.asr.startswith("whisper:")
        finals = [t for t in call.of(protocol.Transcript) if t.final]
        assert finals and all(t.text for t in finals)  # random whisper: gibberish, but text
        assert "".join(t.text for t in call.of(protocol.BotText))
        assert call.audio_frames > 0 and len(call.audio) % 2 == 0
        assert call.has(protocol.BotStartedSpeaking)
        latency = call.of(protocol.Latency)[0]
        assert latency.session_id == call.started.session_id and latency.stop_secs == stop_secs
        assert latency.vad_stop_t <= latency.transcript_final_t <= latency.llm_first_text_t
        assert latency.llm_first_text_t <= latency.tts_first_audio_t <= latency.first_audio_sent_t
        assert latency.server_ms > 0
        # the server stamps the frame when its write returned; the loopback client got it then
        assert abs(latency.first_audio_sent_t - call.first_audio_t) < 0.5
        # measured from the VAD's last speech window to the turn end (wall clock; the audio is
        # sent faster than real time here, so stop_secs of stream silence pass sooner)
        assert latency.speech_end_t < latency.vad_stop_t <= latency.turn_end_t
        assert latency.endpointing_ms == round(
            (latency.turn_end_t - latency.speech_end_t) * 1000, 2) > 0
    assert a.started.session_id != b.started.session_id

    # the same turns reached the JSON-lines log and the Prometheus metrics
    log_text = await asyncio.to_thread(Path(live_server.state.config.latency_log).read_text)
    lines = [json.loads(x) for x in log_text.splitlines()]
    logged = {(r["session_id"], r["turn"]) for r in lines}
    assert {(a.started.session_id, 1), (b.started.session_id, 1)} <= logged
    metrics = (await asyncio.to_thread(_get, live_server.url + "/metrics")).decode()
    health = json.loads(await asyncio.to_thread(_get, live_server.url + "/healthz"))
    assert "diffvoice_turns_total" in metrics
    assert health["status"] == "ok" and health["asr"].startswith("whisper:")
    # the server describes itself, for `bench voice --url` run from another machine
    assert health["machine"]["cpus"] >= 1 and "pipecat-ai" in health["versions"]


@pytest.mark.parametrize(
    "bad, code, close",
    [
        ("{not json", "bad_json", 1007),
        ('{"type":"dance"}', "unknown_type", 1003),
        (b"\x01\x02\x03", "odd_pcm", 1007),
        ('{"type":"session.start","config":{"stop_secs":"soon"}}', "bad_field", 1007),
        ('{"type":"session.start"}', "late_session_start", 1008),
    ],
)
async def test_malformed_input_closes_only_that_session(live_server, speech, bad, code, close):
    good_pcm = speech("where are you located")

    async def bad_call():
        async with connect(live_server.ws_url, config={}, until=lambda c: False) as (
            ws,
            call,
            done,
        ):
            await ws.send(bad)  # session.start was sent first, so a second one is "late"
            await asyncio.wait_for(done.wait(), scaled(30))
        return call

    good, bad_result = await asyncio.gather(_one_call(live_server, good_pcm, 0.4), bad_call())
    errors = bad_result.of(protocol.Error)
    assert [e.code for e in errors] == [code]
    assert bad_result.close_code == close and bad_result.close_reason == code
    # the other session carried on to a full turn
    assert good.has(protocol.Latency) and good.audio_frames > 0
    assert good.close_code is None or good.close_code == 1000
