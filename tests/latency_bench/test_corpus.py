"""latency_bench.corpus: espeak-ng and Kokoro prompts, their cache, user WAVs, speech bounds,
what kind of turn each prompt is, pauses in every voice, and dialogues played whole."""

import random
import shutil
from collections import Counter

import numpy as np
import pytest
import soundfile as sf

from diffvoice.latency_bench.config import HOLDOUT_VOICES
from diffvoice.latency_bench.corpus import (
    DEFAULT_SPEEDS,
    DEFAULT_VOICES,
    PAUSED_PROMPTS,
    PAUSES_MS,
    SAMPLE_RATE,
    SLOT_DIALOGUES,
    CorpusError,
    Prompt,
    dialogue_prompts,
    load_audio_dir,
    pause_plan,
    session_units,
    speech_bounds,
    spoken_prompts,
    synthesize_corpus,
)
from diffvoice.latency_bench.load import plan_sessions
from diffvoice.latency_bench.speakers import espeak_speakers, kokoro_speakers
from diffvoice.latency_bench.turns import planned_turn


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_speech_bounds_find_a_burst_in_noise(seed):
    rng = np.random.default_rng(seed)
    start, end = rng.uniform(0.2, 1.0), rng.uniform(1.5, 3.0)
    t = np.arange(int(3.5 * SAMPLE_RATE)) / SAMPLE_RATE
    x = rng.normal(0, 10 ** (-70 / 20), size=t.size)                 # -70 dBFS hiss
    burst = (t >= start) & (t < end)
    x[burst] += 0.3 * np.sin(2 * np.pi * rng.uniform(120, 300) * t[burst])
    found_start, found_end = speech_bounds((x * 32767).astype(np.int16))
    assert found_start == pytest.approx(start, abs=0.011)
    assert found_end == pytest.approx(end, abs=0.011)


def test_silence_has_no_speech():
    with pytest.raises(ValueError, match="no speech"):
        speech_bounds(np.zeros(SAMPLE_RATE, np.int16))


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs Debian espeak-ng")
def test_espeak_corpus_is_cached_and_bounded(tmp_path):
    texts = ["Are you open on Saturdays?", "Where exactly are you located?"]
    prompts = synthesize_corpus(texts, ["en-us", "en-gb+m3"], [160, 220], tmp_path,
                                lead_silence_s=0.4)
    assert len(prompts) == 8 and len(list(tmp_path.glob("*.wav"))) == 8
    for prompt in prompts:
        assert prompt.pcm.dtype == np.int16
        assert 0.4 <= prompt.speech_start_s < 0.6                     # after the lead silence
        assert prompt.speech_end_s > prompt.speech_start_s + 0.5
        rest = prompt.pcm[int(prompt.speech_end_s * SAMPLE_RATE) + 160:]
        assert np.abs(rest.astype(np.int32)).max(initial=0) < 600     # nothing loud after end
    by_speed = {p.name.rsplit("_", 1)[-1]: p.speech_end_s - p.speech_start_s
                for p in prompts if p.text == texts[0] and "en-us" in p.name}
    assert by_speed["220"] < by_speed["160"]                          # faster speech is shorter
    mtimes = sorted(p.stat().st_mtime_ns for p in tmp_path.glob("*.wav"))
    again = synthesize_corpus(texts, ["en-us", "en-gb+m3"], [160, 220], tmp_path,
                              lead_silence_s=0.4)
    assert sorted(p.stat().st_mtime_ns for p in tmp_path.glob("*.wav")) == mtimes   # cache hit
    assert all(np.array_equal(a.pcm, b.pcm) for a, b in zip(prompts, again, strict=True))


def test_user_audio_dir_any_rate_and_channels(tmp_path):
    rate = 44100
    t = np.arange(int(2.0 * rate)) / rate
    tone = np.where((t > 0.5) & (t < 1.25), 0.4 * np.sin(2 * np.pi * 200 * t), 0.0)
    sf.write(tmp_path / "b_stereo.wav", np.stack([tone, tone], axis=1), rate)
    sf.write(tmp_path / "a_mono.flac", tone, rate)
    (tmp_path / "a_mono.txt").write_text("book me in\n")
    (tmp_path / "notes.md").write_text("ignored")
    prompts = load_audio_dir(tmp_path, lead_silence_s=0.0)
    assert [p.name for p in prompts] == ["a_mono", "b_stereo"]
    assert prompts[0].text == "book me in" and prompts[1].text is None
    for prompt in prompts:
        assert prompt.duration_s == pytest.approx(2.0, abs=0.01)
        assert prompt.speech_start_s == pytest.approx(0.5, abs=0.011)
        assert prompt.speech_end_s == pytest.approx(1.25, abs=0.011)


def test_user_audio_dir_errors_are_clear(tmp_path):
    with pytest.raises(CorpusError, match="no .wav"):
        load_audio_dir(tmp_path)
    with pytest.raises(CorpusError, match="not a directory"):
        load_audio_dir(tmp_path / "missing")
    sf.write(tmp_path / "quiet.wav", np.zeros(16000), 16000)
    with pytest.raises(CorpusError, match="quiet.wav: no speech"):
        load_audio_dir(tmp_path)


def _pcm_prompt(name, **meta):
    pcm = np.zeros(SAMPLE_RATE, np.int16)
    pcm[4000:8000] = 3000
    return Prompt(name=name, text=name, pcm=pcm, speech_start_s=0.25, speech_end_s=0.5, **meta)


def test_prompts_say_what_kind_of_turn_they_are():
    assert _pcm_prompt("a").kind == "question" and _pcm_prompt("a").pauses_ms == ()
    assert _pcm_prompt("b", kind="paused", pauses_ms=(450, 450)).pauses_ms == (450, 450)
    with pytest.raises(ValueError, match="kind"):
        _pcm_prompt("c", kind="story")
    with pytest.raises(ValueError, match="pauses_ms"):
        _pcm_prompt("d", kind="paused")
    with pytest.raises(ValueError, match="pauses_ms"):
        _pcm_prompt("e", pauses_ms=(300,))


def test_pause_lengths_span_300_to_800_ms_and_reach_every_voice():
    assert min(PAUSES_MS) == 300 and max(PAUSES_MS) == 800 and len(PAUSES_MS) >= 4
    assert any(len(items) == 3 and "filling" in items[1] for items in PAUSED_PROMPTS)  # lists
    speakers = espeak_speakers(DEFAULT_VOICES, DEFAULT_SPEEDS) + kokoro_speakers(
        ["jm_kumo"], [1.0])
    plan = pause_plan(len(PAUSED_PROMPTS), speakers, PAUSES_MS)
    for voice in {s.voice for s in speakers}:
        lengths = [plan[i][j] for i in range(len(PAUSED_PROMPTS))
                   for j, s in enumerate(speakers) if s.voice == voice]
        counts = Counter(lengths)
        assert set(counts) == set(PAUSES_MS), voice
        assert max(counts.values()) - min(counts.values()) <= 1, voice     # balanced


def test_dialogues_stay_whole_and_in_order_in_every_session():
    request = _pcm_prompt("can I book", dialogue="book/en-us", step=0)
    answer = _pcm_prompt("tuesday", kind="slot", dialogue="book/en-us", step=1)
    lone = [_pcm_prompt(f"q{i}") for i in range(5)]
    units = session_units([answer, *lone, request])          # given out of order
    assert units[0] == (request, answer) and len(units) == 6
    plans = plan_sessions([answer, *lone, request], level=8, turns=4, rng=random.Random(1))
    for plan in plans:
        assert len(plan) >= 4
        for i, prompt in enumerate(plan):
            if prompt is answer:
                assert i > 0 and plan[i - 1] is request      # the answer follows its request
            if prompt is request:
                assert plan[i + 1] is answer                 # never cut after the request
    turn = planned_turn(answer, concurrency=2, session=1, turn=3)
    assert (turn.kind, turn.dialogue, turn.voice, turn.turn) == ("slot", "book/en-us", None, 3)
    with pytest.raises(ValueError, match="steps"):
        session_units([answer])


@pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="needs Debian espeak-ng")
def test_slot_dialogue_is_a_request_then_a_one_word_answer(tmp_path):
    prompts = dialogue_prompts(SLOT_DIALOGUES[:1], espeak_speakers(["en-us"], [175]), tmp_path)
    assert [(p.text, p.kind, p.step) for p in prompts] == [
        (SLOT_DIALOGUES[0][0], "question", 0), (SLOT_DIALOGUES[0][1], "slot", 1)]
    assert len({p.dialogue for p in prompts}) == 1 and prompts[0].voice == "en-us"
    assert prompts[1].speech_end_s - prompts[1].speech_start_s < 1.0      # one word


def test_the_hold_out_voices_are_the_kokoro_voices_training_never_used():
    from diffvoice.agent.train.asr_augment import EVAL_KOKORO_VOICES, TRAIN_KOKORO_VOICES

    assert set(HOLDOUT_VOICES) == {voice for voice, _ in EVAL_KOKORO_VOICES}
    assert not set(HOLDOUT_VOICES) & {voice for voice, _ in TRAIN_KOKORO_VOICES}


def _kokoro_missing() -> str | None:
    from diffvoice.voice.tts.kokoro_model import missing_reason

    return missing_reason()


@pytest.mark.skipif(_kokoro_missing() is not None,
                    reason=f"the packaged Kokoro voice is not installed: {_kokoro_missing()}")
def test_kokoro_prompt_is_spoken_offline_and_cached(tmp_path):
    speakers = kokoro_speakers(["jm_kumo"], [1.0])
    (prompt,) = spoken_prompts(["yes"], speakers, tmp_path, kind="slot")
    assert prompt.voice == "jm_kumo" and prompt.kind == "slot"
    assert prompt.name == "yes_jm_kumo_100" and 0.3 <= prompt.speech_start_s < 0.5
    (again,) = spoken_prompts(["yes"], speakers, tmp_path, kind="slot")
    assert len(list(tmp_path.glob("*.wav"))) == 1 and np.array_equal(prompt.pcm, again.pcm)
    with pytest.raises(CorpusError, match="not one of"):
        spoken_prompts(["yes"], kokoro_speakers(["af_nobody"], [1.0]), tmp_path)
