"""/v1/realtime turn detection as a client configures it, through the `openai` SDK against the
live server: no turn detection (the client commits and asks), server_vad without automatic
responses, without interruptions, with idle_timeout_ms, and semantic_vad's eagerness."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import soxr
from test_realtime_sdk import Client, connect, stream

from diffvoice.voice.realtime.config import EAGERNESS, SessionConfig


def at24k(pcm16k: bytes) -> np.ndarray:
    return soxr.resample(np.frombuffer(pcm16k, dtype=np.int16), 16000, 24000).astype(np.int16)


async def quiet(c: Client, secs: float) -> list:
    """Events that arrive within `secs` (the SDK's, validated)."""
    seen = []
    while True:
        try:
            seen.append(await c.recv(secs))
        except TimeoutError:
            return seen


async def test_no_turn_detection_the_client_commits_and_asks(sdk, live_server, speech):
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "turn_detection": None}}})
        updated = await c.until("session.updated")
        assert updated.session.audio.input.turn_detection is None
        await stream(c, at24k(speech("what time do you open", tail_silence=0.8)), 480)
        # no VAD events and no answer of the server's own
        assert not [e for e in await quiet(c, 2.0) if e.type.startswith(
            ("input_audio_buffer.speech", "response."))]
        await c.conn.input_audio_buffer.commit()
        committed = await c.until("input_audio_buffer.committed")
        await c.conn.response.create()
        created = await c.until("response.created")
        words = [e for e in c.events if e.type ==
                 "conversation.item.input_audio_transcription.completed"]
        assert words and words[-1].item_id == committed.item_id and words[-1].transcript
        assert c.events.index(words[-1]) < c.events.index(created)  # the answer is to them
        done = await c.until("response.done", 60)
        assert done.response.status == "completed"
    finally:
        await manager.__aexit__(None, None, None)


async def test_server_vad_without_automatic_responses(sdk, live_server, speech):
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "create_response": False}}}})
        await c.until("session.updated")
        await stream(c, at24k(speech("do you have parking", tail_silence=1.5)), 480)
        await c.until("conversation.item.input_audio_transcription.completed", 30)
        assert not [e for e in await quiet(c, 2.0) if e.type.startswith("response.")]
        await c.conn.response.create()
        done = await c.until("response.done", 60)
        assert done.response.status == "completed"
    finally:
        await manager.__aexit__(None, None, None)


async def test_without_interrupt_response_the_answer_plays_on(sdk, live_server, speech):
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "interrupt_response": False}}}})
        await c.until("session.updated")
        await stream(c, at24k(speech("tell me everything about your spa", tail_silence=0.9)),
                     480)
        first = await c.until("response.output_audio.delta", 120)
        await stream(c, at24k(speech("wait, stop, stop please", lead_silence=0.0,
                                     tail_silence=0.5)), 480)
        done = await c.until("response.done", 60)
        assert done.response.id == first.response_id
        assert done.response.status == "completed"  # spoken over, not cut off
    finally:
        await manager.__aexit__(None, None, None)


async def test_idle_timeout_answers_a_silent_caller(sdk, live_server):
    """server_vad idle_timeout_ms: nothing said for that long after an answer ->
    input_audio_buffer.timeout_triggered and a response of the model's."""
    manager, c = await connect(sdk, live_server)
    try:
        await c.conn.session.update(session={"type": "realtime", "output_modalities": ["text"],
                                             "audio": {"input": {"turn_detection": {
                                                 "type": "server_vad",
                                                 "idle_timeout_ms": 5000}}}})
        await c.until("session.updated")
        await c.conn.conversation.item.create(item={
            "type": "message", "role": "user", "content": [{"type": "input_text",
                                                            "text": "hello"}]})
        await c.conn.response.create()
        first = await c.until("response.done", 60)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        triggered = await c.until("input_audio_buffer.timeout_triggered", 30)
        waited = loop.time() - t0
        assert 4.0 <= waited, waited
        created = await c.until("response.created")
        assert created.response.id != first.response.id
        assert (await c.until("response.done", 60)).response.status == "completed"
        assert triggered.item_id in {e.item.id for e in c.of("conversation.item.added")}
    finally:
        await manager.__aexit__(None, None, None)


@pytest.mark.parametrize("eagerness", sorted(EAGERNESS))
def test_semantic_vad_eagerness_is_an_operating_point(eagerness):
    cfg = SessionConfig.defaults(model="m", instructions=None, stop_secs=0.4).updated(
        {"audio": {"input": {"turn_detection": {"type": "semantic_vad",
                                                "eagerness": eagerness}}}})
    stop, window = cfg.turn_detection.stop_and_window(default_window=1.0)
    assert (stop, window) == EAGERNESS[eagerness]
    assert cfg.as_session("s")["audio"]["input"]["turn_detection"] == {
        "type": "semantic_vad", "eagerness": eagerness, "create_response": True,
        "interrupt_response": True}


def test_eagerness_orders_the_wait():
    """high answers soonest, low waits longest (both the pause and the meaning window)."""
    assert EAGERNESS["high"] < EAGERNESS["medium"] < EAGERNESS["low"]
