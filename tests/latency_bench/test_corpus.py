"""latency_bench.corpus: espeak-ng prompts, their cache, user WAVs, and speech bounds."""

import shutil

import numpy as np
import pytest
import soundfile as sf

from diffvoice.latency_bench.corpus import (
    SAMPLE_RATE,
    CorpusError,
    load_audio_dir,
    speech_bounds,
    synthesize_corpus,
)


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
