"""The browser-protocol client against a scripted peer: known delays are measured, and the
failures a real server only shows under overload (an answer that resumes while the caller
speaks, a server error, a dropped socket) are counted as errors, never as latencies.

The peer is scripted because these cases cannot be produced on demand by the real server
(tests/latency_bench/test_load_e2e.py covers the real one). It speaks docs/protocol.md through
voice.transport.protocol, detects the caller's speech by energy, and answers REPLY_DELAY_S after the
last loud frame.
"""

import asyncio
import time

import numpy as np
import pytest
from websockets.asyncio.server import serve

from diffvoice.latency_bench.browser_client import run_browser_session
from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt
from diffvoice.voice.transport import protocol

REPLY_DELAY_S = 0.7
ENDPOINTING_S = 0.5


def _tone(seconds, rate=SAMPLE_RATE, amplitude=8000):
    t = np.arange(int(seconds * rate)) / rate
    return (amplitude * np.sin(2 * np.pi * 220 * t)).astype(np.int16)


def _prompt(name):
    pcm = np.concatenate([np.zeros(int(0.2 * SAMPLE_RATE), np.int16), _tone(0.8)])
    return Prompt(name=name, text=name, pcm=pcm, speech_start_s=0.2, speech_end_s=1.0)


async def _send_answer(ws, seconds):
    await ws.send(protocol.BotStartedSpeaking().encode())
    pcm = _tone(seconds)
    for i in range(0, len(pcm), 320):
        await ws.send(pcm[i:i + 320].tobytes())
    await ws.send(protocol.BotStoppedSpeaking().encode())


async def _peer(ws):
    """Turn 1: a normal answer. Turn 2: the previous answer resumes as the caller starts
    speaking, then a normal answer. Turn 3: an error event and a close."""
    await ws.recv()                                     # session.start
    await ws.send(protocol.SessionStarted(
        session_id="s", input_sample_rate=16000, output_sample_rate=SAMPLE_RATE, stop_secs=0.5,
        model="scripted", asr="none", tts="tone").encode())
    turn, loud_before = 0, False
    async for message in ws:
        if not isinstance(message, bytes):
            continue
        loud = np.abs(np.frombuffer(message, "<i2")).max() > 1000
        if loud and not loud_before and turn == 1:
            await _send_answer(ws, 0.2)                 # the turn-1 answer "resumes"
        if loud_before and not loud:                    # the caller just stopped speaking
            turn += 1
            speech_end_t = time.time() - 0.02           # the last loud frame's capture time
            if turn == 3:
                await ws.send(protocol.Error(code="internal", message="scripted").encode())
                await ws.close(1011, "internal")
                return
            await asyncio.sleep(REPLY_DELAY_S)
            vad_stop_t = speech_end_t + ENDPOINTING_S
            await ws.send(protocol.Latency(
                turn=turn, session_id="s", stop_secs=0.5, vad_stop_t=vad_stop_t,
                transcript_final_t=vad_stop_t + 0.05, llm_first_text_t=vad_stop_t + 0.1,
                tts_first_audio_t=vad_stop_t + 0.15, first_audio_sent_t=vad_stop_t + 0.2,
                endpointing_ms=532.0, asr_ms=50.0, llm_ttft_ms=50.0, tts_first_audio_ms=50.0,
                server_ms=200.0).encode())
            await _send_answer(ws, 0.3)
        loud_before = loud


@pytest.mark.timeout(60)
async def test_scripted_peer_delays_and_failures():
    async with serve(_peer, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        config = BenchConfig(url=f"ws://127.0.0.1:{port}/ws", bot_quiet_s=0.3, pause_s=0.2,
                             turn_timeout_s=10.0, progress=False)
        seen = []
        started = await run_browser_session(config, config.url, 0,
                                            [_prompt(f"p{i}") for i in range(4)], 1,
                                            seen.append)
    assert started["model"] == "scripted"
    assert [t.turn for t in seen] == [1, 2, 3, 4]       # every turn reported, in order
    first, resumed, closed, after = seen
    assert first.status == "ok", first.message
    stages = first.stages(shared_clock=True)
    # the peer answered REPLY_DELAY_S after the last loud frame; a 20 ms frame of slack
    assert stages["voice_to_voice_ms"] == pytest.approx(REPLY_DELAY_S * 1000, abs=60)
    assert stages["endpointing_ms"] == pytest.approx(ENDPOINTING_S * 1000, abs=40)
    assert stages["server_ms"] == 200.0 and stages["asr_ms"] == 50.0
    # the turn's evidence, in time order: speech end (1.0 s into the prompt), the latency event
    # REPLY_DELAY_S later, then the answer
    events = [what for _, what in first.timeline]
    times = [t for t, _ in first.timeline]
    assert times == sorted(times)
    assert events[0] == "caller's speech ended (from the audio)"
    assert times[0] == pytest.approx(1.0, abs=0.1)
    latency = next(i for i, e in enumerate(events) if e.startswith("latency: "))
    assert events[latency + 1:latency + 3] == ["bot.started_speaking", "first bot audio frame"]
    assert times[latency] - times[0] == pytest.approx(REPLY_DELAY_S, abs=0.15)
    assert "bot.stopped_speaking" in events[latency:]
    assert resumed.status == "error" and "while the caller was speaking" in resumed.message
    assert resumed.stages(shared_clock=True) == {}       # no latency from a spoiled turn
    assert closed.status == "error" and "internal" in closed.message
    assert after.status == "error" and after.message.startswith("session ended early")
