"""WhisperSTT's streaming policy with a fake decoder (tests/voice/asr/fake_whisper.py): the
final reuses the last pass when nothing was said after it, passes respect the per-call cap
(except the pass due at a pause) and the shared budget. Audio is a loud tone (speech) and
zeros (pauses); VAD frames are explicit."""

from __future__ import annotations

import asyncio

import pytest
from fake_whisper import WORDS, FakeRunner
from pipecat.frames.frames import InterimTranscriptionFrame, TranscriptionFrame
from streaming_helpers import run_with_vad_frames, silence, tone

from diffvoice.voice.asr.pass_budget import PassBudget
from diffvoice.voice.asr.whisper_stt import StreamingOptions, WhisperSTT


def _stt(runner, budget=None, **options) -> WhisperSTT:
    return WhisperSTT(
        None, model_name="fake", runner=runner, budget=budget, options=StreamingOptions(**options)
    )


async def test_final_reuses_the_last_pass_when_nothing_came_after_it():
    runner = FakeRunner()
    stt = _stt(runner, min_new_audio_secs=0.5, pause_secs=0.2, max_passes_per_sec=10)
    audio = silence(0.2) + tone(1.0) + silence(0.7)
    heard = await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.5)])
    finals = heard.of(TranscriptionFrame)
    assert len(finals) == 1
    assert finals[0].text == " ".join(WORDS[:10])  # all ten loud 100 ms windows were heard
    assert not [p for p in stt.pass_log if p["final"]], "a final pass ran although not needed"
    assert len(runner.calls) == len(stt.pass_log) >= 2  # every pass counted, none hidden
    last = max(runner.calls, key=lambda c: c["start"])
    assert last["samples"] >= int(1.2 * 16000)  # the pause pass heard the end of the speech
    assert heard.of(InterimTranscriptionFrame)[-1].text == finals[0].text


async def test_speech_after_the_last_pass_gets_a_final_pass():
    runner = FakeRunner()
    # one pass per 2.5 s: the pass at 0.5 s is the only one before the VAD stop at ~1.9 s (the
    # 0.4 s of silence is shorter than pause_secs: no pause pass)
    stt = _stt(runner, min_new_audio_secs=0.5, pause_secs=0.5, max_passes_per_sec=0.4)
    audio = tone(1.5) + silence(0.4)
    heard = await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.3)])
    finals = heard.of(TranscriptionFrame)
    assert [p["final"] for p in stt.pass_log] == [False, True]
    assert runner.calls[-1]["samples"] == len(audio) // 2  # the final heard the whole segment
    assert finals[0].text == " ".join(WORDS[:15])
    interims = heard.of(InterimTranscriptionFrame)
    assert interims and interims[0].text == " ".join(WORDS[:5])


async def test_a_pause_gets_its_pass_at_once_despite_the_cap():
    """The turn may end at a pause: its transcript is made then, not at the next cadence slot,
    and the final reuses it."""
    runner = FakeRunner()
    # one pass per 2.5 s: without the pause rule the pass at 0.5 s would be the last before
    # the VAD stop, and the final would need a pass of its own
    stt = _stt(runner, min_new_audio_secs=0.5, pause_secs=0.2, max_passes_per_sec=0.4)
    audio = tone(0.9) + silence(0.8)
    heard = await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.6)])
    assert [p["final"] for p in stt.pass_log] == [False, False]
    gap = stt.pass_log[1]["started"] - stt.pass_log[0]["started"]
    assert gap < 1.0, gap  # started at the pause, well inside the 2.5 s cadence
    assert heard.of(TranscriptionFrame)[0].text == " ".join(WORDS[:9])
    # the pause pass's interim says so (the drafter drafts it at once); the cadence pass's
    # interim, heard while the caller spoke on, does not
    assert [f.result.at_pause for f in heard.of(InterimTranscriptionFrame)] == [False, True]


async def test_a_pause_after_a_pass_that_heard_everything_flags_that_pass_at_once():
    """A cadence pass that already heard all the speech needs no pass at the pause: its text
    is pushed again, flagged at_pause, as soon as the pause is heard (the drafter drafts it
    then, not at the final transcript after the VAD stop), and the final reuses it."""
    runner = FakeRunner()
    stt = _stt(runner, min_new_audio_secs=0.5, pause_secs=0.2, max_passes_per_sec=10)
    audio = tone(0.5) + silence(0.8)
    heard = await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.6)])
    assert [p["final"] for p in stt.pass_log] == [False]  # one pass, nothing after it
    interims = heard.of(InterimTranscriptionFrame)
    assert [f.text for f in interims] == [" ".join(WORDS[:5])] * 2
    assert [f.result.at_pause for f in interims] == [False, True]
    assert heard.of(TranscriptionFrame)[0].text == " ".join(WORDS[:5])
    # the flagged interim came at the pause, well before the VAD stop at the end of the audio
    times = {id(f): t for t, f in heard.frames}
    final_t = times[id(heard.of(TranscriptionFrame)[0])]
    assert final_t - times[id(interims[1])] > 0.3


async def test_a_pause_the_caller_broke_during_its_pass_is_not_at_pause():
    """A caller who speaks on while the pause's pass runs: that text is not the turn's."""
    runner = FakeRunner(delay_secs=0.3)
    stt = _stt(runner, min_new_audio_secs=5.0, pause_secs=0.2, max_passes_per_sec=10)
    audio = tone(0.5) + silence(0.25) + tone(0.5) + silence(0.5)
    heard = await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.4)])
    flags = [f.result.at_pause for f in heard.of(InterimTranscriptionFrame)]
    assert flags == [False, True], flags  # the first pause was broken before its pass ended


async def test_passes_per_second_are_capped():
    runner = FakeRunner(delay_secs=0.01)
    stt = _stt(runner, min_new_audio_secs=0.05, pause_secs=0.05, max_passes_per_sec=4)
    await run_with_vad_frames(stt, [("start", 0), ("audio", tone(3.0)), ("stop", 0.2)])
    interim = [p["started"] for p in stt.pass_log if not p["final"]]
    assert len(interim) >= 8  # passes were due all the time: the cap is what limited them
    gaps = [b - a for a, b in zip(interim, interim[1:], strict=False)]
    assert min(gaps) >= 0.25, gaps  # started no more often than 4 per second
    # as the worker threads saw them (thread start jitter allowed: one extra per second)
    starts = sorted(c["start"] for c in runner.calls)[: len(interim)]
    for t in starts:
        assert sum(t <= s < t + 1.0 for s in starts) <= 5


async def test_shared_budget_runs_fewer_passes_under_load():
    budget = PassBudget(1)
    runners = [FakeRunner(delay_secs=0.3) for _ in range(2)]
    services = [
        _stt(r, budget, min_new_audio_secs=0.1, pause_secs=0.1, max_passes_per_sec=10)
        for r in runners
    ]
    parts = [("start", 0), ("audio", tone(2.0) + silence(0.3)), ("stop", 0.3)]
    heard = await asyncio.gather(*(run_with_vad_frames(s, parts) for s in services))
    assert budget.peak == 1  # never two passes at once on the shared model
    assert budget.skipped > 0  # due passes were skipped rather than queued
    for h in heard:  # yet each call still got its complete final transcript
        assert [f.text for f in h.of(TranscriptionFrame)] == [" ".join(WORDS[:20])]
    for r in runners:  # no pass of one call overlapped another pass of the same call
        spans = sorted((c["start"], c["end"]) for c in r.calls)
        assert all(b[0] >= a[1] for a, b in zip(spans, spans[1:], strict=False))


async def test_two_segments_give_two_finals_in_order():
    runner = FakeRunner()
    stt = _stt(runner, min_new_audio_secs=0.3)
    parts = [
        ("start", 0), ("audio", tone(0.6) + silence(0.3)), ("stop", 0.3),
        ("audio", silence(0.3)),
        ("start", 0), ("audio", tone(0.9) + silence(0.3)), ("stop", 0.3),
    ]  # fmt: skip
    heard = await run_with_vad_frames(stt, parts)
    finals = heard.of(TranscriptionFrame)
    assert [f.result.segment for f in finals] == [1, 2]
    assert finals[1].text == " ".join(WORDS[:9])


async def test_the_only_call_on_the_model_gets_its_pause_pass_sooner():
    """`idle_pause_secs` while no other call uses the model: a 0.15 s pause (shorter than
    pause_secs 0.2) gets its pass at once. With a second call on the same model it does not,
    and each call counts itself in the budget from start to stop."""
    audio = tone(0.5) + silence(0.15) + tone(0.5) + silence(0.5)
    options = dict(min_new_audio_secs=5.0, pause_secs=0.2, idle_pause_secs=0.1,
                   max_passes_per_sec=10)
    seen = []
    for others in (0, 1):
        budget = PassBudget(2)
        for _ in range(others):
            budget.join()  # another call streaming into this model
        stt = _stt(FakeRunner(), budget, **options)
        await run_with_vad_frames(stt, [("start", 0), ("audio", audio), ("stop", 0.4)])
        assert budget.calls == others  # this call left the count when it stopped
        seen.append([round(p["audio_secs"], 2) for p in stt.pass_log])
    alone, shared = seen
    assert len(alone) == 2 and alone[0] < 0.7, alone  # a pass in the 0.15 s pause
    assert len(shared) == 1 and shared[0] >= 1.15, shared  # only at the last pause


def test_idle_pause_is_at_most_the_pause():
    with pytest.raises(ValueError, match="idle_pause_secs"):
        StreamingOptions(pause_secs=0.2, idle_pause_secs=0.3)
