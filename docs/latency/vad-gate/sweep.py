"""Which one-word slot answers (latency_bench.corpus.SLOT_DIALOGUES, second turns) pipecat's
Silero VAD confirms as speech (reaches SPEAKING) per loudness gate (VADParams.min_volume), over
the wideband path and the phone path (8 kHz mu-law and back to 16 kHz); and whether noise starts
speech at any gate. Development set: the espeak-ng voices; hold-out: the Kokoro voices. Each
word has 0.5 s of digital silence before and after it, as a caller's silence over Twilio is.

    python docs/latency/vad-gate/sweep.py                 # gates 0.6 .. 0.0 (sweep.txt)
    python docs/latency/vad-gate/sweep.py --start-secs    # the development phone path at gate
                                                          # 0.5, start_secs 0.15 and 0.1
                                                          # (sweep_start_secs.txt)
"""
import sys
from pathlib import Path

import numpy as np
import soxr
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams, VADState

from diffvoice.latency_bench.corpus import SLOT_DIALOGUES, dialogue_prompts
from diffvoice.latency_bench.speakers import espeak_speakers, kokoro_speakers
from diffvoice.voice.telephony import mulaw


def phone(x):
    y = soxr.resample(x, 16000, 8000)
    y = mulaw.decode(mulaw.encode((np.clip(y, -1, 1) * 32767).astype(np.int16)))
    return soxr.resample(np.asarray(y, np.float32) / 32768, 8000, 16000)


def confirmed(x, min_volume, start_secs=0.2):
    pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
    pcm = np.concatenate([np.zeros(8000, np.int16), pcm, np.zeros(8000, np.int16)])
    params = VADParams(stop_secs=0.2, min_volume=min_volume, start_secs=start_secs)
    vad = SileroVADAnalyzer(sample_rate=16000, params=params)
    vad.set_sample_rate(16000)
    return any(vad._run_analyzer(pcm[i:i + 512].tobytes()) == VADState.SPEAKING
               for i in range(0, len(pcm) - 512, 512))


def noises():
    rng = np.random.default_rng(0)
    for kind in ("white", "pink", "hum"):
        for db in (-50, -40, -30, -20):
            n = 16000 * 5
            if kind == "white":
                x = rng.standard_normal(n)
            elif kind == "pink":
                f = np.fft.rfft(rng.standard_normal(n))
                f /= np.maximum(np.arange(len(f)), 1) ** 0.5
                x = np.fft.irfft(f, n)
            else:
                t = np.arange(n) / 16000
                x = np.sin(2 * np.pi * 60 * t) + 0.5 * np.sin(2 * np.pi * 120 * t)
            yield kind, db, (x / np.sqrt(np.mean(x ** 2)) * 10 ** (db / 20)).astype(np.float32)


def main(start_secs_sweep: bool) -> None:
    cache = Path("~/.cache/diffvoice/bench-corpus").expanduser()
    sets = {"dev (espeak)": espeak_speakers(["en-us", "en-us+f3", "en-gb+m3", "en-us+f2"],
                                            [150, 175, 200])}
    if start_secs_sweep:  # (gate, start_secs) per level, printed as start_secs
        levels, paths = {0.15: (0.5, 0.15), 0.1: (0.5, 0.1)}, ("phone",)
    else:
        levels = {mv: (mv, 0.2) for mv in (0.6, 0.5, 0.4, 0.3, 0.0)}
        paths = ("wide", "phone")
        sets["hold-out (Kokoro)"] = kokoro_speakers(["jm_kumo", "jf_gongitsune"], [1.0, 1.15])
    for name, speakers in sets.items():
        prompts = [p for p in dialogue_prompts(SLOT_DIALOGUES, speakers, cache) if p.step == 1]
        for path in paths:
            for level, args in levels.items():
                missed = []
                for p in prompts:
                    x = p.pcm.astype(np.float32) / 32768
                    if not confirmed(phone(x) if path == "phone" else x, *args):
                        missed.append(p.name)
                ok = len(prompts) - len(missed)
                print(name, path, level, ok, "/", len(prompts), missed[:6], flush=True)
    for kind, db, x in noises():
        print("noise", kind, db, {level: confirmed(x, *args) for level, args in levels.items()},
              flush=True)


if __name__ == "__main__":
    main("--start-secs" in sys.argv[1:])
