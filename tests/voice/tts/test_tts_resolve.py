"""TTS selection: Kokoro/Piper only when their files are on disk, else espeak with a warning."""

from __future__ import annotations

from voice.tts.resolve import resolve_tts


def test_espeak_default():
    backend = resolve_tts("espeak")
    assert backend.name == "espeak:en-us" and backend.sample_rate == 22050
    assert backend.warnings == []
    assert type(backend.make_service()).__name__ == "EspeakTTSService"


def test_missing_kokoro_and_piper_files_fall_back_to_espeak(tmp_path):
    for kind in ("kokoro", "piper"):
        backend = resolve_tts(kind, model_dir=str(tmp_path))
        assert backend.name == "espeak:en-us"
        assert any(str(tmp_path) in w for w in backend.warnings)
        assert any("using espeak-ng instead" in w for w in backend.warnings)
