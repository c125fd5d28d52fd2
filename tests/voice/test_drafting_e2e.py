"""Eager drafts through the real server (uvicorn on loopback, browser protocol, Silero VAD,
streaming pocketsphinx with the domain LM — real words from espeak-ng audio, so interim
transcripts can be drafted — and the random-weight engine): each turn's latency record says
how many drafts it cost and whether the answer came from one, endpointing is measured from the
VAD's speech end to the turn end, a later user turn after the bot finished speaking sends no
playback.flush, and after the hang-up the engine holds no request and no draft of the call."""

from __future__ import annotations

import asyncio
import time

import pytest
from voice_client import connect, send_pcm
from voice_fixtures import RANDOM_LLM, LiveServer, scaled

from diffvoice.voice.transport import protocol


async def _wait_for(predicate, within: float, what: str):
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def sphinx_server(random_engine):
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    config = ServeConfig(port=0, model="random-sdar", asr="pocketsphinx", max_new_tokens=24)
    asr = resolve_asr(config.asr, "cpu")
    state = AppState.create(config, random_engine, asr=asr, llm_overrides=RANDOM_LLM)
    with LiveServer(state) as server:
        yield server


async def test_turn_records_count_drafts_and_the_call_leaves_nothing_behind(
    sphinx_server, random_engine, speech
):
    live_server = sphinx_server
    config = {"stop_secs": 0.2, "turn_window_secs": 0.6, "eager_drafts": True}
    async with connect(live_server.ws_url, config=config) as (ws, call, _):
        for n, text in enumerate(["what time do you open on saturday", "where are you"], 1):
            await send_pcm(ws, speech(text, lead_silence=0.3, tail_silence=1.0), speed=1.0)
            await _wait_for(lambda n=n: len(call.of(protocol.Latency)) >= n, scaled(60),
                            f"latency record {n}")
            await _wait_for(lambda: call.has(protocol.BotStoppedSpeaking), scaled(30),
                            "bot.stopped_speaking")
            await asyncio.sleep(scaled(1.0))  # the answer has played out at the client
        session_id = call.started.session_id
        records = call.of(protocol.Latency)
    for r in records:
        assert r.drafts is not None and r.drafts >= 1, "the final transcript is drafted"
        assert isinstance(r.draft_hit, bool) and r.extra_passes >= 0 and r.answer_passes > 0
        # a draft that answered started before the turn ended (the final transcript's at the
        # latest), within the turn; no draft answered, no lead
        if r.draft_hit:
            assert 0 <= r.draft_lead_ms < (r.turn_end_t - r.speech_end_t) * 1000 + scaled(5000)
        else:
            assert r.draft_lead_ms is None
        assert r.speech_end_t is not None and r.speech_end_t < r.vad_stop_t <= r.turn_end_t
        assert r.endpointing_ms == round((r.turn_end_t - r.speech_end_t) * 1000, 2)
        # the VAD needs stop_secs of silence; the turn ends within the window (+ ASR, slack)
        assert 200 <= r.endpointing_ms < 600 + scaled(1000)
    assert not call.has(protocol.PlaybackFlush), "no bot audio was left to drop"
    await _wait_for(
        lambda: not {r for r in random_engine.active_request_ids() if session_id in r},
        scaled(10), "the call's engine requests to end")
    assert random_engine.stats()["drafts"] == 0
