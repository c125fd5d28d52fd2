"""TTS selection: Kokoro/Piper only when their files are on disk, else espeak with a warning."""

from __future__ import annotations

from diffvoice.voice.tts.resolve import resolve_tts


def test_espeak_default():
    backend = resolve_tts("espeak")
    assert backend.name == "espeak:en-us" and backend.sample_rate == 22050
    assert backend.warnings == []
    assert type(backend.make_service()).__name__ == "EspeakTTSService"


def test_missing_kokoro_and_piper_files_fall_back_to_espeak(tmp_path, monkeypatch):
    from diffvoice.voice.tts import kokoro_model

    # without kokoro-v1.0.onnx in model_dir and without the packaged voice
    monkeypatch.setattr(kokoro_model, "missing_reason", lambda: "packages not installed: x")
    for kind in ("kokoro", "piper"):
        backend = resolve_tts(kind, model_dir=str(tmp_path))
        assert backend.name == "espeak:en-us"
        assert any(str(tmp_path) in w for w in backend.warnings)
        assert any("using espeak-ng instead" in w for w in backend.warnings)


def test_kokoro_without_files_uses_the_packaged_int8_voice(tmp_path):
    import pytest

    from diffvoice.voice.tts import kokoro_model

    reason = kokoro_model.missing_reason()
    if reason:
        pytest.skip(f"packaged Kokoro voice absent: {reason}")
    backend = resolve_tts("kokoro", model_dir=str(tmp_path))
    assert backend.name == f"kokoro:{kokoro_model.DEFAULT_VOICE}" and backend.sample_rate == 24000
    assert any(str(tmp_path) in w for w in backend.warnings)
    assert type(backend.make_service()).__name__ == "PackagedKokoroTTSService"
    assert resolve_tts("kokoro", voice="nope").name.startswith("espeak")
