"""Spoken prompts for the voice benchmark: espeak-ng speech made offline, or the user's WAVs.

Contract:
- `Prompt` is one utterance as 16 kHz mono int16 PCM plus where speech starts and ends in it
  (`speech_start_s`, `speech_end_s`), found from the audio itself by `speech_bounds`. The load
  client uses `speech_end_s` as the ground-truth end of user speech.
- `synthesize_corpus(texts, voices, speeds, cache_dir)` runs the `espeak-ng` command line once per
  (text, voice, speed), resamples to 16 kHz, pads `lead_silence_s` in front, and caches the WAV
  (soundfile) under a name derived from all inputs and the espeak-ng version, so a second run
  reads the cache. Raises `CorpusError` with the fix when espeak-ng is missing.
- `load_audio_dir(path)` reads every *.wav / *.flac there (any rate, mono or stereo) into
  prompts; `default_corpus(...)` is the receptionist set the bench uses by default.
- `paused_corpus(items, voices, speeds, cache_dir)` speaks every piece of an utterance with
  hesitations (PAUSED_PROMPTS, e.g. "what time" / "um" / "do you open on saturday") separately,
  trims each piece to its speech and joins them with 300-600 ms of silence (`PAUSES_MS`, cycled
  per prompt and voice, so every pause length occurs in every voice); its text is the pieces
  joined by spaces. `corpus_for(name, ...)` picks "receptionist", "paused" or "mixed" (both).

It knows nothing about sockets, protocols or reports. Nothing is downloaded.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000
WINDOW_S = 0.010

# Questions a caller asks a small clinic's receptionist: the domain of the embedded model
# (models/receptionist-tiny, trained on agent/'s dental-clinic fact sheet), phrased the way
# people say them. Short and without long internal pauses, so that one prompt is one user turn
# at the default stop_secs.
RECEPTIONIST_PROMPTS: tuple[str, ...] = (
    "When are you open on Saturday?",
    "What are your opening hours for Thursday?",
    "Where exactly is the office located?",
    "How much does a cleaning cost?",
    "Can I book a checkup for Friday afternoon?",
    "What is your phone number?",
    "Are you open on Sunday?",
    "I need to cancel my appointment.",
    "Do you take new patients?",
    "What services do you offer?",
    "Is there parking near the clinic?",
    "Tell me your hours please.",
)
# The same kind of questions with the pauses people make while they think: a filler or a
# half-finished phrase, then 300-600 ms of silence, then the rest. A server that ends the turn
# at a pause answers a question the caller has not finished asking.
PAUSED_PROMPTS: tuple[tuple[str, ...], ...] = (
    ("what time", "um", "do you open on saturday"),
    ("how much", "uh", "does a cleaning cost"),
    ("where exactly", "is the office located"),
    ("I need to", "um", "cancel my appointment"),
    ("do you", "uh", "take new patients"),
    ("what are your", "opening hours for thursday"),
    ("can I book a", "um", "checkup for friday"),
    ("is there", "parking near the clinic"),
)
PAUSES_MS: tuple[int, ...] = (300, 450, 600)
CORPORA = ("receptionist", "paused", "mixed")
DEFAULT_VOICES: tuple[str, ...] = ("en-us", "en-us+f3", "en-gb+m3", "en-us+f2")
DEFAULT_SPEEDS: tuple[int, ...] = (150, 175, 200)


class CorpusError(RuntimeError):
    """The prompts cannot be produced; the message says what to do."""


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str | None            # None for user audio without a transcript
    pcm: np.ndarray             # int16 [n_samples], 16 kHz mono
    speech_start_s: float
    speech_end_s: float
    voice: str | None = None    # espeak-ng voice (None for user audio)

    def __post_init__(self) -> None:
        if self.pcm.dtype != np.int16 or self.pcm.ndim != 1:
            raise ValueError(f"prompt {self.name!r}: pcm must be 1-D int16")
        if not 0.0 <= self.speech_start_s < self.speech_end_s <= self.duration_s + 1e-9:
            raise ValueError(f"prompt {self.name!r}: speech bounds {self.speech_start_s:.3f}.."
                             f"{self.speech_end_s:.3f} s outside the {self.duration_s:.3f} s audio")

    @property
    def duration_s(self) -> float:
        return len(self.pcm) / SAMPLE_RATE


def speech_bounds(pcm: np.ndarray, sample_rate: int = SAMPLE_RATE,
                  threshold_db: float = -45.0) -> tuple[float, float]:
    """(start_s, end_s) of speech: first/last 10 ms window above the energy threshold.

    The threshold is `threshold_db` dBFS, raised to 15 dB above the recording's noise floor
    (10th-percentile window) for noisy user audio. Raises ValueError if nothing is above it.
    """
    x = np.asarray(pcm)
    x = x.astype(np.float64) / 32768.0 if x.dtype == np.int16 else x.astype(np.float64)
    window = max(1, int(round(WINDOW_S * sample_rate)))
    n_windows = len(x) // window
    if n_windows == 0:
        raise ValueError("audio shorter than one 10 ms window")
    frames = x[: n_windows * window].reshape(n_windows, window)       # [W, window]
    level_db = 10.0 * np.log10(np.mean(frames**2, axis=1) + 1e-12)   # [W]
    threshold = max(threshold_db, float(np.percentile(level_db, 10)) + 15.0)
    loud = np.flatnonzero(level_db > threshold)
    if loud.size == 0:
        raise ValueError(f"no speech above {threshold:.1f} dBFS")
    return loud[0] * window / sample_rate, (loud[-1] + 1) * window / sample_rate


def to_prompt(name: str, text: str | None, audio: np.ndarray, sample_rate: int,
              lead_silence_s: float = 0.0) -> Prompt:
    """Mono-mix, resample to 16 kHz int16, pad leading silence and locate the speech."""
    x = np.asarray(audio, dtype=np.float32)
    if x.ndim == 2:
        x = x.mean(axis=1)                                            # [n, ch] -> [n]
    if sample_rate != SAMPLE_RATE:
        x = soxr.resample(x, sample_rate, SAMPLE_RATE).astype(np.float32)
    x = np.concatenate([np.zeros(int(round(lead_silence_s * SAMPLE_RATE)), np.float32), x])
    pcm = (np.clip(x, -1.0, 1.0) * 32767.0).astype(np.int16)
    start_s, end_s = speech_bounds(pcm)
    return Prompt(name=name, text=text, pcm=pcm, speech_start_s=start_s, speech_end_s=end_s)


def _espeak_and_cache(cache_dir) -> tuple[str, str, Path]:
    """(espeak-ng binary, its version, the created cache folder); CorpusError without espeak-ng."""
    binary = shutil.which("espeak-ng")
    if binary is None:
        raise CorpusError("espeak-ng is not installed: `make system-deps` (Debian package "
                          "espeak-ng), or pass --audio DIR with your own WAV files")
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    return binary, _espeak_version(binary), cache_dir


def _espeak_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.strip()


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def synthesize_corpus(texts: Sequence[str], voices: Sequence[str], speeds: Sequence[int],
                      cache_dir: Path, lead_silence_s: float = 0.3) -> list[Prompt]:
    """Every (text, voice, speed) spoken by espeak-ng, cached as 16 kHz WAVs in `cache_dir`."""
    if not texts or not voices or not speeds:
        raise ValueError("texts, voices and speeds must each be non-empty")
    for speed in speeds:
        if not 80 <= int(speed) <= 450:
            raise ValueError(f"espeak-ng speed must be 80..450 words per minute, got {speed}")
    binary, version, cache_dir = _espeak_and_cache(cache_dir)
    prompts = []
    for text in texts:
        for voice in voices:
            for speed in speeds:
                key = hashlib.sha1(f"{version}|{voice}|{speed}|{lead_silence_s}|{text}".encode())
                name = f"{_slug(text)}_{voice.replace('+', '-')}_{speed}"
                path = cache_dir / f"{name}_{key.hexdigest()[:10]}.wav"
                if not path.exists():
                    _speak_to(binary, text, voice, int(speed), path, lead_silence_s)
                pcm, rate = sf.read(path, dtype="int16")
                start_s, end_s = speech_bounds(pcm, rate)
                prompts.append(Prompt(name=name, text=text, pcm=pcm, speech_start_s=start_s,
                                      speech_end_s=end_s, voice=voice))
    return prompts


def _speak_to(binary: str, text: str, voice: str, speed: int, path: Path,
              lead_silence_s: float) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw.wav"
        result = subprocess.run([binary, "-v", voice, "-s", str(speed), "-w", str(raw), text],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0 or not raw.exists():
            raise CorpusError(f"espeak-ng failed for voice {voice!r}: {result.stderr.strip()}")
        audio, rate = sf.read(raw, dtype="float32")
    prompt = to_prompt(path.stem, text, audio, rate, lead_silence_s)
    tmp_path = path.with_suffix(".tmp.wav")
    sf.write(tmp_path, prompt.pcm, SAMPLE_RATE, subtype="PCM_16")
    tmp_path.replace(path)   # atomic: concurrent runs never read a half-written WAV


def load_audio_dir(directory: Path, lead_silence_s: float = 0.3) -> list[Prompt]:
    """The user's own prompts: every .wav/.flac in `directory` (sorted), any rate, any channels.

    A sidecar `NAME.txt` next to `NAME.wav` is taken as the prompt's transcript.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise CorpusError(f"--audio {directory}: not a directory")
    files = sorted(p for p in directory.iterdir() if p.suffix.lower() in (".wav", ".flac"))
    if not files:
        raise CorpusError(f"--audio {directory}: no .wav or .flac files")
    prompts = []
    for path in files:
        try:
            audio, rate = sf.read(path, dtype="float32")
            sidecar = path.with_suffix(".txt")
            text = sidecar.read_text(encoding="utf-8").strip() if sidecar.exists() else None
            prompts.append(to_prompt(path.stem, text, audio, rate, lead_silence_s))
        except (RuntimeError, ValueError) as exc:
            raise CorpusError(f"{path}: {exc}") from exc
    return prompts


def default_corpus(cache_dir: Path, voices: Sequence[str] = DEFAULT_VOICES,
                   speeds: Sequence[int] = DEFAULT_SPEEDS,
                   texts: Sequence[str] = RECEPTIONIST_PROMPTS) -> list[Prompt]:
    return synthesize_corpus(texts, voices, speeds, cache_dir)


def _speak_piece(binary: str, text: str, voice: str, speed: int) -> np.ndarray:
    """One piece as 16 kHz int16, trimmed to its speech."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "piece.wav"
        result = subprocess.run([binary, "-v", voice, "-s", str(speed), "-w", str(raw), text],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0 or not raw.exists():
            raise CorpusError(f"espeak-ng failed for voice {voice!r}: {result.stderr.strip()}")
        audio, rate = sf.read(raw, dtype="float32")
    prompt = to_prompt("piece", text, audio, rate)
    start = int(round(prompt.speech_start_s * SAMPLE_RATE))
    end = int(round(prompt.speech_end_s * SAMPLE_RATE))
    return prompt.pcm[start:end]


def paused_corpus(items: Sequence[Sequence[str]], voices: Sequence[str],
                  speeds: Sequence[int], cache_dir: Path, lead_silence_s: float = 0.3,
                  pauses_ms: Sequence[int] = PAUSES_MS) -> list[Prompt]:
    """Every (utterance, voice, speed): pieces spoken apart, joined with 300-600 ms pauses."""
    if not items or not voices or not speeds or not pauses_ms:
        raise ValueError("items, voices, speeds and pauses_ms must each be non-empty")
    binary, version, cache_dir = _espeak_and_cache(cache_dir)
    prompts = []
    for i, pieces in enumerate(items):
        text = " ".join(pieces)
        for v, voice in enumerate(voices):
            for speed in speeds:
                pauses = [int(pauses_ms[(i + v + k) % len(pauses_ms)])
                          for k in range(len(pieces) - 1)]
                key = hashlib.sha1(f"{version}|{voice}|{speed}|{lead_silence_s}|{pauses}|"
                                   f"{'|'.join(pieces)}".encode())
                name = f"paused-{_slug(text)}_{voice.replace('+', '-')}_{speed}"
                path = cache_dir / f"{name}_{key.hexdigest()[:10]}.wav"
                if not path.exists():
                    parts = [np.zeros(int(round(lead_silence_s * SAMPLE_RATE)), np.int16)]
                    for k, piece in enumerate(pieces):
                        if k:
                            parts.append(np.zeros(pauses[k - 1] * SAMPLE_RATE // 1000, np.int16))
                        parts.append(_speak_piece(binary, piece, voice, int(speed)))
                    parts.append(np.zeros(SAMPLE_RATE // 10, np.int16))
                    tmp_path = path.with_suffix(".tmp.wav")
                    sf.write(tmp_path, np.concatenate(parts), SAMPLE_RATE, subtype="PCM_16")
                    tmp_path.replace(path)
                pcm, rate = sf.read(path, dtype="int16")
                start_s, end_s = speech_bounds(pcm, rate)
                prompts.append(Prompt(name=name, text=text, pcm=pcm, speech_start_s=start_s,
                                      speech_end_s=end_s, voice=voice))
    return prompts


def corpus_for(name: str, cache_dir: Path, voices: Sequence[str] = DEFAULT_VOICES,
               speeds: Sequence[int] = DEFAULT_SPEEDS) -> list[Prompt]:
    """"receptionist" (plain questions), "paused" (with hesitations) or "mixed" (both)."""
    if name not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {name!r}")
    prompts: list[Prompt] = []
    if name in ("receptionist", "mixed"):
        prompts += default_corpus(cache_dir, voices, speeds)
    if name in ("paused", "mixed"):
        prompts += paused_corpus(PAUSED_PROMPTS, voices, speeds, cache_dir)
    return prompts
