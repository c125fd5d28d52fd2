"""sweep.py's phone-path development set at the chosen gate (min_volume 0.5) with a shorter
VAD start (VADParams.start_secs 0.15 and 0.1 instead of 0.2), and noise at both.
`python docs/latency/vad-gate/sweep_start_secs.py` (output: sweep_start_secs.txt)."""
from pathlib import Path
import numpy as np, soxr
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
    vad = SileroVADAnalyzer(sample_rate=16000, params=VADParams(stop_secs=0.2, min_volume=min_volume, start_secs=start_secs))
    vad.set_sample_rate(16000)
    hits = 0
    for i in range(0, len(pcm) - 512, 512):
        if vad._run_analyzer(pcm[i:i + 512].tobytes()) == VADState.SPEAKING:
            hits += 1
    return hits > 0

cache = Path("~/.cache/diffvoice/bench-corpus").expanduser()
sets = {"dev (espeak)": espeak_speakers(["en-us", "en-us+f3", "en-gb+m3", "en-us+f2"], [150, 175, 200]),
        }
levels = [0.15, 0.1]  # start_secs
out = {}
for name, speakers in sets.items():
    prompts = [p for p in dialogue_prompts(SLOT_DIALOGUES, speakers, cache) if p.step == 1]
    for path in ("phone",):
        row = {}
        for mv in levels:
            ok = 0
            missed = []
            for p in prompts:
                x = p.pcm.astype(np.float32) / 32768
                x = phone(x) if path == "phone" else x
                if confirmed(x, 0.5, mv):
                    ok += 1
                else:
                    missed.append(p.name if hasattr(p, "name") else p.text)
            row[mv] = (ok, len(prompts), missed[:8])
            print(name, path, mv, ok, "/", len(prompts), missed[:6], flush=True)
        out[f"{name} {path}"] = row
rng = np.random.default_rng(0)
for kind in ("white", "pink", "hum"):
    for db in (-50, -40, -30, -20):
        n = 16000 * 5
        if kind == "white":
            x = rng.standard_normal(n)
        elif kind == "pink":
            f = np.fft.rfft(rng.standard_normal(n)); f /= np.maximum(np.arange(len(f)), 1) ** 0.5
            x = np.fft.irfft(f, n)
        else:
            t = np.arange(n) / 16000; x = np.sin(2 * np.pi * 60 * t) + 0.5 * np.sin(2 * np.pi * 120 * t)
        x = x / np.sqrt(np.mean(x ** 2)) * 10 ** (db / 20)
        res = {mv: confirmed(x.astype(np.float32), 0.5, mv) for mv in levels}
        print("noise", kind, db, res, flush=True)
