"""Spoken prompts for the voice benchmark: speech made offline (espeak-ng, Kokoro), or the user's
WAVs.

Contract:
- `Prompt` is one utterance as 16 kHz mono int16 PCM plus where speech starts and ends in it
  (`speech_start_s`, `speech_end_s`), found from the audio itself by `speech_bounds`. The load
  client uses `speech_end_s` as the ground-truth end of user speech. Its `kind` says what the
  caller does: "question" (one breath), "paused" (silences inside the sentence; `pauses_ms`
  lists them in order) or "slot" (a one- or two-word answer to the bot's question). Prompts
  with the same `dialogue` id are one caller's consecutive turns, said in `step` order within
  one session (`session_units` groups them); a prompt without one stands alone.
- `spoken_prompts(texts, speakers, cache_dir)` speaks every (text, speaker)
  (latency_bench.speakers: espeak-ng or Kokoro), resamples to 16 kHz, pads `lead_silence_s` in
  front and caches the WAV (soundfile) under a name derived from all inputs and the engine's
  version, so a second run reads the cache. `synthesize_corpus(texts, voices, speeds, ...)` is
  the same for espeak-ng voices x speeds. Raises `CorpusError` with the fix when an engine is
  missing.
- `paused_prompts(items, speakers, cache_dir)` speaks every piece of an utterance with
  hesitations (PAUSED_PROMPTS: fillers like "what time" / "um" / "do you open on saturday",
  and lists like "I'd like a cleaning" / "a filling" / "and teeth whitening") separately,
  trims each piece to its speech and joins them with one pause length from `PAUSES_MS`
  (300-800 ms; every pause of one prompt has the same length). The length is cycled over the
  (utterance, speed) renderings of each voice, offset per voice, so every pause length occurs
  in every voice. Its text is the pieces joined by spaces. `paused_corpus(items, voices,
  speeds, ...)` is the same for espeak-ng voices x speeds.
- `dialogue_prompts(dialogues, speakers, cache_dir)`: SLOT_DIALOGUES, a booking request
  ("Can I book a cleaning?", kind "question") then its answer ("tuesday", kind "slot"), one
  dialogue per (dialogue, speaker).
- `load_audio_dir(path)` reads every *.wav / *.flac there (any rate, mono or stereo) into
  prompts; `default_corpus(...)` is the receptionist set the bench uses by default.
- `corpus_for(name, ...)` picks "receptionist" (plain questions), "paused" (with pauses),
  "mixed" (both) or "turns" (plain, paused and slot dialogues), spoken by the espeak-ng
  voices x speeds and, when given, the Kokoro voices x speeds.

It knows nothing about sockets, protocols or reports. Nothing is downloaded.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from diffvoice.latency_bench.speakers import (
    CorpusError,
    Speaker,
    Synth,
    espeak_speakers,
    kokoro_speakers,
)

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
# half-finished phrase, then 300-800 ms of silence, then the rest; and lists, whose first item
# already sounds like a complete sentence. A server that ends the turn at a pause answers a
# question the caller has not finished asking.
PAUSED_PROMPTS: tuple[tuple[str, ...], ...] = (
    ("what time", "um", "do you open on saturday"),
    ("how much", "uh", "does a cleaning cost"),
    ("where exactly", "is the office located"),
    ("I need to", "um", "cancel my appointment"),
    ("do you", "uh", "take new patients"),
    ("what are your", "opening hours for thursday"),
    ("can I book a", "um", "checkup for friday"),
    ("is there", "parking near the clinic"),
    ("I'd like a cleaning", "a filling", "and teeth whitening"),
    ("how much is a cleaning", "a filling", "and a crown"),
    ("I could come on monday", "tuesday", "or friday"),
)
PAUSES_MS: tuple[int, ...] = (300, 450, 600, 800)
# A booking request, then the caller's answer to the bot's follow-up question: one or two words,
# the shortest turns a caller says and the ones where a slow endpoint is felt most.
SLOT_DIALOGUES: tuple[tuple[str, ...], ...] = (
    ("Can I book a cleaning?", "tuesday"),
    ("I'd like to book a checkup.", "friday"),
    ("Can I come in for a filling this week?", "yes"),
    ("Can I book teeth whitening on Monday?", "ten thirty"),
    ("I want to make an appointment for a cleaning.", "maria"),
    ("Do you have time on Thursday for a checkup?", "afternoon"),
)
CORPORA = ("receptionist", "paused", "mixed", "turns")
KINDS = ("question", "paused", "slot")
DEFAULT_VOICES: tuple[str, ...] = ("en-us", "en-us+f3", "en-gb+m3", "en-us+f2")
DEFAULT_SPEEDS: tuple[int, ...] = (150, 175, 200)


@dataclass(frozen=True)
class Prompt:
    name: str
    text: str | None            # None for user audio without a transcript
    pcm: np.ndarray             # int16 [n_samples], 16 kHz mono
    speech_start_s: float
    speech_end_s: float
    voice: str | None = None    # espeak-ng or Kokoro voice (None for user audio)
    kind: str = "question"      # question / paused / slot
    pauses_ms: tuple[int, ...] = ()   # silences inside the speech, in order (kind "paused")
    dialogue: str | None = None  # one caller's consecutive turns share it
    step: int = 0                # position within the dialogue

    def __post_init__(self) -> None:
        if self.pcm.dtype != np.int16 or self.pcm.ndim != 1:
            raise ValueError(f"prompt {self.name!r}: pcm must be 1-D int16")
        if not 0.0 <= self.speech_start_s < self.speech_end_s <= self.duration_s + 1e-9:
            raise ValueError(f"prompt {self.name!r}: speech bounds {self.speech_start_s:.3f}.."
                             f"{self.speech_end_s:.3f} s outside the {self.duration_s:.3f} s audio")
        if self.kind not in KINDS:
            raise ValueError(f"prompt {self.name!r}: kind must be one of {KINDS}, got "
                             f"{self.kind!r}")
        if (self.kind == "paused") != bool(self.pauses_ms):
            raise ValueError(f"prompt {self.name!r}: pauses_ms must be given exactly for kind "
                             f"'paused', got kind {self.kind!r} with {self.pauses_ms!r}")

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


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]


def _cached_pcm(path: Path, make: Callable[[], np.ndarray]) -> np.ndarray:
    """The 16 kHz int16 WAV at `path`, written by `make()` first when it is not there."""
    if not path.exists():
        tmp_path = path.with_suffix(".tmp.wav")
        sf.write(tmp_path, make(), SAMPLE_RATE, subtype="PCM_16")
        tmp_path.replace(path)   # atomic: concurrent runs never read a half-written WAV
    pcm, rate = sf.read(path, dtype="int16")
    if rate != SAMPLE_RATE:
        raise CorpusError(f"{path}: cached prompt is {rate} Hz, expected {SAMPLE_RATE}")
    return pcm


def _from_pcm(name: str, text: str, pcm: np.ndarray, speaker: Speaker, **meta) -> Prompt:
    start_s, end_s = speech_bounds(pcm)
    return Prompt(name=name, text=text, pcm=pcm, speech_start_s=start_s, speech_end_s=end_s,
                  voice=speaker.label, **meta)


def _cache_path(cache_dir: Path, name: str, key: str) -> Path:
    return cache_dir / f"{name}_{hashlib.sha1(key.encode()).hexdigest()[:10]}.wav"


def spoken_prompts(texts: Sequence[str], speakers: Sequence[Speaker], cache_dir: Path,
                   lead_silence_s: float = 0.3, synth: Synth | None = None,
                   kind: str = "question") -> list[Prompt]:
    """Every (text, speaker) as a prompt of `kind`, cached as 16 kHz WAVs in `cache_dir`."""
    if not texts or not speakers:
        raise ValueError("texts and speakers must each be non-empty")
    synth = synth or Synth()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    prompts = []
    for text in texts:
        for speaker in speakers:
            name = f"{_slug(text)}_{speaker.tag}"
            key = (f"{synth.version(speaker.engine)}|{speaker.voice}|{speaker.speed}|"
                   f"{lead_silence_s}|{text}")

            def make(text=text, speaker=speaker) -> np.ndarray:
                audio, rate = synth.speak(speaker, text)
                return to_prompt("raw", text, audio, rate, lead_silence_s).pcm

            pcm = _cached_pcm(_cache_path(cache_dir, name, key), make)
            prompts.append(_from_pcm(name, text, pcm, speaker, kind=kind))
    return prompts


def synthesize_corpus(texts: Sequence[str], voices: Sequence[str], speeds: Sequence[int],
                      cache_dir: Path, lead_silence_s: float = 0.3) -> list[Prompt]:
    """Every (text, voice, speed) spoken by espeak-ng, cached as 16 kHz WAVs in `cache_dir`."""
    if not voices or not speeds:
        raise ValueError("texts, voices and speeds must each be non-empty")
    return spoken_prompts(texts, espeak_speakers(voices, speeds), cache_dir, lead_silence_s)


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


DECAY_S = 0.06  # kept after a piece's last loud window: its natural fade below the threshold


def speech_only(synth: Synth, speaker: Speaker, text: str) -> np.ndarray:
    """One piece as 16 kHz int16, trimmed to its speech and the `DECAY_S` fade after it (cut at
    the -45 dB threshold, a word ends abruptly: Smart Turn then hears a caller cut off, P(complete)
    0.91 -> 0.05 on one Kokoro question, which would flatter it at every pause)."""
    audio, rate = synth.speak(speaker, text)
    prompt = to_prompt("piece", text, audio, rate)
    start = int(round(prompt.speech_start_s * SAMPLE_RATE))
    end = int(round((prompt.speech_end_s + DECAY_S) * SAMPLE_RATE))
    return prompt.pcm[start:end]


def pause_plan(n_items: int, speakers: Sequence[Speaker],
               pauses_ms: Sequence[int]) -> list[list[int]]:
    """plan[item][speaker]: the pause length of that rendering. Per voice, the (item, speed)
    renderings walk PAUSES_MS in turn from an offset of the voice's index, so each voice hears
    every length once it has as many renderings as there are lengths."""
    voices = list(dict.fromkeys(s.voice for s in speakers))
    speeds_per_voice = {v: [s for s in speakers if s.voice == v] for v in voices}
    plan = []
    for i in range(n_items):
        row = []
        for speaker in speakers:
            same_voice = speeds_per_voice[speaker.voice]
            index = i * len(same_voice) + same_voice.index(speaker) + voices.index(speaker.voice)
            row.append(int(pauses_ms[index % len(pauses_ms)]))
        plan.append(row)
    return plan


def paused_prompts(items: Sequence[Sequence[str]], speakers: Sequence[Speaker],
                   cache_dir: Path, lead_silence_s: float = 0.3,
                   pauses_ms: Sequence[int] = PAUSES_MS,
                   synth: Synth | None = None) -> list[Prompt]:
    """Every (utterance, speaker): pieces spoken apart, joined by pauses (module docstring)."""
    if not items or not speakers or not pauses_ms:
        raise ValueError("items, speakers and pauses_ms must each be non-empty")
    if any(len(pieces) < 2 for pieces in items):
        raise ValueError("a paused utterance needs at least two pieces")
    synth = synth or Synth()
    cache_dir = Path(cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    plan = pause_plan(len(items), speakers, pauses_ms)
    prompts = []
    for i, pieces in enumerate(items):
        text = " ".join(pieces)
        for j, speaker in enumerate(speakers):
            pauses = (plan[i][j],) * (len(pieces) - 1)
            name = f"paused-{_slug(text)}_{speaker.tag}"
            key = (f"{synth.version(speaker.engine)}|{speaker.voice}|{speaker.speed}|"
                   f"{lead_silence_s}|{list(pauses)}|decay {DECAY_S}|{'|'.join(pieces)}")

            def make(pieces=pieces, speaker=speaker, pauses=pauses) -> np.ndarray:
                parts = [np.zeros(int(round(lead_silence_s * SAMPLE_RATE)), np.int16)]
                for k, piece in enumerate(pieces):
                    if k:
                        parts.append(np.zeros(pauses[k - 1] * SAMPLE_RATE // 1000, np.int16))
                    parts.append(speech_only(synth, speaker, piece))
                parts.append(np.zeros(SAMPLE_RATE // 10, np.int16))
                return np.concatenate(parts)

            pcm = _cached_pcm(_cache_path(cache_dir, name, key), make)
            prompts.append(_from_pcm(name, text, pcm, speaker, kind="paused",
                                     pauses_ms=pauses))
    return prompts


def paused_corpus(items: Sequence[Sequence[str]], voices: Sequence[str],
                  speeds: Sequence[int], cache_dir: Path, lead_silence_s: float = 0.3,
                  pauses_ms: Sequence[int] = PAUSES_MS) -> list[Prompt]:
    """`paused_prompts` for every espeak-ng voice x speed."""
    if not voices or not speeds:
        raise ValueError("items, voices, speeds and pauses_ms must each be non-empty")
    return paused_prompts(items, espeak_speakers(voices, speeds), cache_dir, lead_silence_s,
                          pauses_ms)


def dialogue_prompts(dialogues: Sequence[Sequence[str]], speakers: Sequence[Speaker],
                     cache_dir: Path, lead_silence_s: float = 0.3,
                     synth: Synth | None = None) -> list[Prompt]:
    """Every (dialogue, speaker): its request (kind "question") then its answers (kind "slot"),
    one dialogue id per (dialogue, speaker), steps 0, 1, ..."""
    if not dialogues or any(len(d) < 2 for d in dialogues):
        raise ValueError("a dialogue is a request and at least one answer")
    synth = synth or Synth()
    prompts = []
    for dialogue in dialogues:
        for speaker in speakers:
            dialogue_id = f"{_slug(dialogue[0])}/{speaker.tag}"
            for step, text in enumerate(dialogue):
                (said,) = spoken_prompts([text], [speaker], cache_dir, lead_silence_s, synth,
                                         kind="question" if step == 0 else "slot")
                prompts.append(dataclasses.replace(said, dialogue=dialogue_id, step=step))
    return prompts


def session_units(prompts: Sequence[Prompt]) -> list[tuple[Prompt, ...]]:
    """What a session plays as one piece: a lone prompt, or a dialogue's prompts in step order.

    Units keep the order in which their first prompt appears. Raises ValueError when a
    dialogue's steps are not 0, 1, ... each once."""
    units: dict[str | int, list[Prompt]] = {}
    for i, prompt in enumerate(prompts):
        units.setdefault(prompt.dialogue if prompt.dialogue is not None else i, []).append(prompt)
    out = []
    for key, members in units.items():
        members.sort(key=lambda p: p.step)
        if [p.step for p in members] != list(range(len(members))):
            raise ValueError(f"dialogue {key!r}: steps {[p.step for p in members]} are not "
                             f"0..{len(members) - 1}")
        out.append(tuple(members))
    return out


def corpus_for(name: str, cache_dir: Path, voices: Sequence[str] = DEFAULT_VOICES,
               speeds: Sequence[int] = DEFAULT_SPEEDS, kokoro_voices: Sequence[str] = (),
               kokoro_speeds: Sequence[float] = (1.0,)) -> list[Prompt]:
    """The named corpus (module docstring) spoken by the espeak-ng voices x speeds, then by the
    Kokoro voices x speeds."""
    if name not in CORPORA:
        raise ValueError(f"corpus must be one of {CORPORA}, got {name!r}")
    synth = Synth()
    cache_dir = Path(cache_dir)
    groups = [espeak_speakers(voices, speeds)]
    if kokoro_voices:
        groups.append(kokoro_speakers(kokoro_voices, kokoro_speeds))
    prompts: list[Prompt] = []
    for speakers in groups:   # per engine, so pause lengths cycle within each engine's voices
        if name in ("receptionist", "mixed", "turns"):
            prompts += spoken_prompts(RECEPTIONIST_PROMPTS, speakers, cache_dir, synth=synth)
        if name in ("paused", "mixed", "turns"):
            prompts += paused_prompts(PAUSED_PROMPTS, speakers, cache_dir, synth=synth)
        if name == "turns":
            prompts += dialogue_prompts(SLOT_DIALOGUES, speakers, cache_dir, synth=synth)
    return prompts
