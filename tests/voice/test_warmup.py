"""Ready means warm (voice.warmup): /healthz answers 503 {"status": "warming", "reason"} while
the call path warms up, 200 once one answer went through the engine; a part that fails is named
and the server still becomes ready. Real uvicorn, the random-weight engine, the tiny Whisper."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import urllib.error
import urllib.request

from voice_fixtures import UvicornThread, scaled

from diffvoice.voice import warmup
from diffvoice.voice.server import create_app
from diffvoice.voice.warmup import Readiness


def _health(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url + "/healthz", timeout=10) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _until_ready(url: str) -> tuple[int, dict]:
    deadline = time.monotonic() + scaled(60)
    while True:
        code, body = _health(url)
        if code == 200 or time.monotonic() > deadline:
            return code, body
        time.sleep(0.05)


def test_healthz_is_503_until_an_answer_went_through_the_engine(voice_state, monkeypatch):
    gate = threading.Event()
    passes: list[int] = []  # the engine's passes before and after the warm-up answer
    real = warmup._answer

    async def held_answer(state):
        await asyncio.to_thread(gate.wait, scaled(60))
        passes.append(state.engine.stats()["passes"])
        await real(state)
        passes.append(state.engine.stats()["passes"])

    monkeypatch.setattr(warmup, "_answer", held_answer)
    monkeypatch.setattr(voice_state, "readiness", Readiness())
    with UvicornThread(create_app(voice_state)) as live:
        deadline = time.monotonic() + scaled(60)
        code, body = _health(live.url)
        while body.get("reason") != "warming up the call path: answer" and (
                time.monotonic() < deadline):
            assert code == 503 and body["status"] == "warming", body  # never ready before it
            time.sleep(0.02)
            code, body = _health(live.url)
        assert code == 503 and body["reason"] == "warming up the call path: answer", body
        assert set(body["warm_up"]["parts_s"]) >= {"pipecat", "asr"}  # done before the answer
        gate.set()
        code, body = _until_ready(live.url)
        assert code == 200 and body["status"] == "ok", body
        assert body["warm_up"]["ready"] and "answer" in body["warm_up"]["parts_s"]
        # start-up's objects moved out of the collector's way (issue 54: 240 ms collections)
        assert "heap" in body["warm_up"]["parts_s"] and gc.get_freeze_count() > 0
        assert not body["warm_up"]["failed"]
    assert len(passes) == 2 and passes[1] > passes[0]  # the answer was decoded


def test_a_failing_part_is_named_and_the_server_still_becomes_ready(voice_state, monkeypatch):
    def broken(state):
        raise RuntimeError("no whisper today")

    monkeypatch.setattr(warmup, "_asr", broken)
    monkeypatch.setattr(voice_state, "readiness", Readiness())
    with UvicornThread(create_app(voice_state)) as live:
        code, body = _until_ready(live.url)
        assert code == 200, body
        assert "no whisper today" in body["warm_up"]["failed"]["asr"]
        assert "answer" in body["warm_up"]["parts_s"]
