"""The appointment book's tools inside a real voice call, without a trained model: the real
server on loopback (browser protocol, espeak audio in, random Whisper ASR, espeak TTS out), the
real engine with a random-weight model, pipecat's function calling and the SQLite book. Only the
model's *decision* to call is stood in for (tool_choice "required" until the turn has a result,
which a random model would almost never choose by itself); the call's arguments are decoded by
the engine, run against the book, and the result is spoken in a second answer."""

from __future__ import annotations

import asyncio
import sqlite3
import time

import pytest
from book_facts import facts_file  # noqa: E402
from voice_client import connect, send_pcm
from voice_fixtures import RANDOM_LLM, TINY_WHISPER, LiveServer, scaled

from diffvoice.voice.transport import protocol


@pytest.fixture(scope="module")
def server(random_engine, tmp_path_factory):
    from diffvoice.agent.tools import ReceptionistTools
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    tmp = tmp_path_factory.mktemp("voice-tools")
    config = ServeConfig(port=0, model="random-sdar", asr=str(TINY_WHISPER), stop_secs=0.4,
                         max_new_tokens=16, receptionist_tools="off")
    asr = resolve_asr(config.asr, "cpu", no_speech_threshold=None, max_new_tokens=8)
    state = AppState.create(config, random_engine, asr=asr, llm_overrides=RANDOM_LLM)
    state.receptionist = ReceptionistTools.for_model(tmp, db_path=tmp / "book.sqlite3",
                                                     facts_path=facts_file(tmp))
    calls = []
    real_call = state.receptionist.call

    def spy(name, arguments, *, caller=None, **kwargs):
        result = real_call(name, arguments, caller=caller, **kwargs)
        calls.append((name, arguments, result, caller))
        return result

    state.receptionist.call = spy
    with LiveServer(state) as live:
        yield live, calls, tmp / "book.sqlite3"


@pytest.fixture
def decides_to_call(monkeypatch):
    from diffvoice.voice.llm_service import DiffusionLLMService

    real = DiffusionLLMService.params_for

    def params_for(self, context):
        params = real(self, context)
        if params.tools and params.tool_choice != "none":
            import dataclasses

            params = dataclasses.replace(params, tool_choice={
                "type": "function", "function": {"name": "book_appointment"}})
        return params

    monkeypatch.setattr(DiffusionLLMService, "params_for", params_for)


async def test_a_spoken_turn_calls_the_book_and_speaks_the_outcome(server, speech,
                                                                   decides_to_call):
    live, calls, db = server
    async with connect(live.ws_url, config={"stop_secs": 0.4}) as (ws, call, _done):
        await send_pcm(ws, speech("book me a cleaning on friday at ten"))
        deadline = time.monotonic() + scaled(90)
        while time.monotonic() < deadline:
            if calls and call.has(protocol.BotStoppedSpeaking):
                break
            await asyncio.sleep(0.1)
    assert len(calls) == 1, calls
    name, args, result, caller = calls[0]
    assert name == "book_appointment" and set(args) == {"service", "day", "time", "name"}
    # the booking belongs to this browser session (issue 39 item 10), not to anything said
    assert caller is not None and caller.startswith("session:") and len(caller) > 8
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT service, day, start_min, name, owner FROM visits").fetchall()
    if result == {"booked": True}:
        h, m = map(int, args["time"].split(":"))
        assert rows == [(args["service"], args["day"], h * 60 + m, args["name"].strip(), caller)]
    else:
        assert result["booked"] is False and rows == []
    # the result went back to the model, whose second answer was spoken
    assert "".join(e.text for e in call.of(protocol.BotText))
    assert call.audio_frames > 0
