"""TurnTracker on synthetic frame sequences with a fake clock: event stream, latency arithmetic
checked against a direct computation (endpointing measured from the VAD's speech end to the turn
end), interruption, playback.flush only while bot audio may still play, empty-answer cases."""

from __future__ import annotations

import random

import pytest
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    BotStoppedSpeakingFrame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
    UserStoppedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)

from diffvoice.voice.transport import protocol
from diffvoice.voice.turn_tracker import TurnTracker


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def _audio() -> TTSAudioRawFrame:
    return TTSAudioRawFrame(audio=b"\x01\x00" * 160, sample_rate=16000, num_channels=1)


def _tracker(stop_secs=0.5, speech_end=None):
    clock, events, records = FakeClock(), [], []

    async def emit(e):
        events.append(e)

    async def sink(r):
        records.append(r)

    tracker = TurnTracker(
        session_id="s1", stop_secs=stop_secs, emit=emit, record_sink=sink, clock=clock,
        speech_end=speech_end,
    )  # fmt: skip
    return tracker, clock, events, records


@pytest.mark.parametrize("seed", range(4))
async def test_turn_record_matches_direct_computation(seed):
    rng = random.Random(seed)
    stop_secs = rng.choice([0.2, 0.5, 0.8])
    stamps = {}
    tracker, clock, events, records = _tracker(stop_secs, speech_end=lambda: stamps["speech"])
    steps = [rng.uniform(0.001, 0.5) for _ in range(7)]
    stamps["speech"] = clock.t - stop_secs - steps[5]  # the VAD's last speech window

    async def at(name, where, frame, step):
        clock.t += step
        stamps[name] = clock.t
        await tracker.on_frame(where, frame)

    await at("vad", "stt", VADUserStoppedSpeakingFrame(), 0.0)
    await at("asr", "stt", TranscriptionFrame("when do you open", "", "now"), steps[0])
    await at("end", "stt", UserStoppedSpeakingFrame(), steps[6])
    await at("start", "llm", LLMFullResponseStartFrame(), steps[1])
    await at("llm", "llm", LLMTextFrame("We open"), steps[2])
    await tracker.on_frame("llm", LLMTextFrame(" at nine."))
    await at("tts", "tts", _audio(), steps[3])
    await tracker.on_frame("out", BotStartedSpeakingFrame())
    await at("sent", "out", _audio(), steps[4])
    await tracker.on_frame("out", _audio())  # later audio does not make a second record

    assert len(records) == 1
    r = records[0]
    ms = lambda a, b: round((stamps[b] - stamps[a]) * 1000, 2)  # noqa: E731
    assert r["asr_ms"] == ms("vad", "asr")
    assert r["llm_ttft_ms"] == ms("asr", "llm")
    assert r["tts_first_audio_ms"] == ms("llm", "tts")
    assert r["server_ms"] == ms("vad", "sent")
    assert r["endpointing_ms"] == ms("speech", "end")
    assert (r["speech_end_t"], r["turn_end_t"]) == (stamps["speech"], stamps["end"])
    assert r["user_turn_ends"] == 1
    assert (r["turn"], r["session_id"], r["stop_secs"]) == (1, "s1", stop_secs)
    assert r["user_text"] == "when do you open" and r["bot_text"] == "We open at nine."
    assert r["interrupted"] is False
    kinds = [type(e) for e in events]
    assert kinds == [
        protocol.Transcript, protocol.BotText, protocol.BotText,
        protocol.BotStartedSpeaking, protocol.Latency,
    ]  # fmt: skip
    assert events[-1] == protocol.Latency(**r)


async def test_interruption_before_audio_and_flush_after_audio():
    tracker, clock, events, records = _tracker()
    await tracker.on_frame("stt", VADUserStoppedSpeakingFrame())
    await tracker.on_frame("stt", TranscriptionFrame("hi", "", "now"))
    await tracker.on_frame("llm", LLMFullResponseStartFrame())
    await tracker.on_frame("llm", LLMTextFrame("Hel"))
    await tracker.on_frame("out", InterruptionFrame())  # barge-in before any audio
    assert records[-1]["interrupted"] is True and records[-1]["first_audio_sent_t"] is None
    assert not any(isinstance(e, protocol.PlaybackFlush) for e in events)  # nothing to flush

    await tracker.on_frame("llm", LLMFullResponseStartFrame())  # turn 2 speaks, then barge-in
    await tracker.on_frame("llm", LLMTextFrame("Sure."))
    await tracker.on_frame("out", _audio())
    await tracker.on_frame("out", InterruptionFrame())
    assert [r["turn"] for r in records] == [1, 2] and records[1]["interrupted"] is False
    assert isinstance(events[-1], protocol.PlaybackFlush)


async def test_empty_answer_is_reported_at_response_end():
    tracker, _, _, records = _tracker()
    await tracker.on_frame("llm", LLMFullResponseStartFrame())
    await tracker.on_frame("llm", LLMTextFrame(""))
    await tracker.on_frame("llm", LLMFullResponseEndFrame())
    assert len(records) == 1 and records[0]["bot_text"] == ""
    assert records[0]["vad_stop_t"] is None and records[0]["server_ms"] is None
    await tracker.close()
    assert len(records) == 1


async def test_no_flush_after_the_bot_stopped_speaking_and_its_audio_played():
    tracker, clock, events, _ = _tracker()
    await tracker.on_frame("llm", LLMFullResponseStartFrame())
    await tracker.on_frame("llm", LLMTextFrame("We open at nine."))
    await tracker.on_frame("out", BotStartedSpeakingFrame())
    for _ in range(5):  # 5 x 10 ms of audio sent at once: plays until t + 50 ms
        await tracker.on_frame("out", _audio())
    clock.t += 0.03
    await tracker.on_frame("out", BotStoppedSpeakingFrame())
    await tracker.on_frame("out", InterruptionFrame())  # 20 ms still queued at the client
    assert sum(isinstance(e, protocol.PlaybackFlush) for e in events) == 1

    await tracker.on_frame("llm", LLMFullResponseStartFrame())
    await tracker.on_frame("out", BotStartedSpeakingFrame())
    await tracker.on_frame("out", _audio())
    clock.t += 1.0
    await tracker.on_frame("out", BotStoppedSpeakingFrame())
    await tracker.on_frame("out", InterruptionFrame())  # the next user turn: nothing to drop
    assert sum(isinstance(e, protocol.PlaybackFlush) for e in events) == 1


async def test_endpointing_is_none_without_a_speech_end():
    tracker, clock, _, records = _tracker()
    await tracker.on_frame("stt", VADUserStoppedSpeakingFrame())
    await tracker.on_frame("stt", TranscriptionFrame("hi there", "", "now"))
    await tracker.on_frame("llm", LLMFullResponseStartFrame())
    await tracker.on_frame("llm", LLMFullResponseEndFrame())
    assert records[0]["endpointing_ms"] is None
