"""Barge-in on the real server: caller audio arriving while the bot speaks aborts the engine
request (seen in the engine's own state), drops queued audio and sends playback.flush; hanging
up aborts whatever the session still has running."""

from __future__ import annotations

import asyncio
import time

import pytest
from voice_client import connect, send_pcm
from voice_fixtures import RANDOM_LLM, TINY_WHISPER, LiveServer, scaled

from diffvoice.voice.transport import protocol

# An answer budget that takes the random engine tens of seconds to finish, so that a request
# still running after the barge-in could only have been stopped by the interruption.
LONG_ANSWER = {"max_new_tokens": 1024, "steps_per_block": 32, "ignore_eos": True, **RANDOM_LLM}


@pytest.fixture(scope="module")
def long_answer_server(random_engine):
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    config = ServeConfig(port=0, model="random-sdar", asr=str(TINY_WHISPER), stop_secs=0.4,
                         smart_turn=True)  # the sound of the turn weighs in (voice.turn_end)
    asr = resolve_asr(config.asr, "cpu", no_speech_threshold=None, max_new_tokens=8)
    state = AppState.create(config, random_engine, asr=asr, llm_overrides=LONG_ANSWER)
    with LiveServer(state) as server:
        yield server


def _session_requests(engine, session_id: str) -> set[str]:
    return {r for r in engine.active_request_ids() if r.startswith(f"voice-{session_id}-")}


async def _wait_for(predicate, within: float, what: str):
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_barge_in_aborts_engine_request_and_flushes(
    long_answer_server, random_engine, speech, monkeypatch
):
    aborted: list[str] = []
    real_abort = random_engine.abort

    def spy_abort(request_id: str) -> None:  # records, then really aborts
        aborted.append(request_id)
        real_abort(request_id)

    monkeypatch.setattr(random_engine, "abort", spy_abort)
    question = speech("hello, can you tell me the opening hours")
    barge_in = speech("wait, stop, that is not what I asked", lead_silence=0.0)

    async with connect(long_answer_server.ws_url, config={"stop_secs": 0.4}) as (ws, call, _):
        await send_pcm(ws, question)
        await _wait_for(lambda: call.audio_frames > 0, scaled(60), "first bot audio")
        session_id = call.started.session_id
        speaking = _session_requests(random_engine, session_id)
        assert len(speaking) == 1, "the answer is still being generated while the bot speaks"
        (request_id,) = speaking

        await send_pcm(ws, barge_in, speed=2.0)
        await _wait_for(lambda: call.has(protocol.PlaybackFlush), scaled(30), "playback.flush")
        # the interrupted request left the engine (aborted, not finished: its budget is huge)
        await _wait_for(
            lambda: request_id not in random_engine.active_request_ids(), scaled(5), "abort"
        )
        assert request_id in aborted
        await _wait_for(
            lambda: call.has(protocol.BotStoppedSpeaking), scaled(5), "bot.stopped_speaking"
        )
        first_turn = call.of(protocol.Latency)[0]
        assert first_turn.turn == 1 and first_turn.first_audio_sent_t is not None

        # the barge-in is a new user turn: it is transcribed and answered by a new request
        await _wait_for(
            lambda: _session_requests(random_engine, session_id) - {request_id},
            scaled(30),
            "second answer",
        )
        (second,) = _session_requests(random_engine, session_id)

    # hanging up cancels the session's pipeline, which aborts its running request
    await _wait_for(lambda: second not in random_engine.active_request_ids(), scaled(10), "hangup")
    assert second in aborted
