"""Which one-word slot answers (latency_bench.corpus.SLOT_DIALOGUES, second turns) pipecat's
Silero VAD confirms as speech (reaches SPEAKING) per loudness gate (VADParams.min_volume), over
the wideband path and the phone path (8 kHz mu-law and back to 16 kHz); and whether noise starts
speech at any gate. Development set: the espeak-ng voices; hold-out: the Kokoro voices.
`python docs/latency/vad-gate/sweep.py` (output: sweep.txt). Each word has 0.5 s of digital
silence before and after it, as a caller's silence over Twilio is."""
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

def confirmed(x, min_volume):
    pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
    pcm = np.concatenate([np.zeros(8000, np.int16), pcm, np.zeros(8000, np.int16)])
    vad = SileroVADAnalyzer(sample_rate=16000, params=VADParams(stop_secs=0.2, min_volume=min_volume))
    vad.set_sample_rate(16000)
    hits = 0
    for i in range(0, len(pcm) - 512, 512):
        if vad._run_analyzer(pcm[i:i + 512].tobytes()) == VADState.SPEAKING:
            hits += 1
    return hits > 0

cache = Path("~/.cache/diffvoice/bench-corpus").expanduser()
sets = {"dev (espeak)": espeak_speakers(["en-us", "en-us+f3", "en-gb+m3", "en-us+f2"], [150, 175, 200]),
        "hold-out (Kokoro)": kokoro_speakers(["jm_kumo", "jf_gongitsune"], [1.0, 1.15])}
levels = [0.6, 0.5, 0.4, 0.3, 0.0]
out = {}
for name, speakers in sets.items():
    prompts = [p for p in dialogue_prompts(SLOT_DIALOGUES, speakers, cache) if p.step == 1]
    for path in ("wide", "phone"):
        row = {}
        for mv in levels:
            ok = 0
            missed = []
            for p in prompts:
                x = p.pcm.astype(np.float32) / 32768
                x = phone(x) if path == "phone" else x
                if confirmed(x, mv):
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
        res = {mv: confirmed(x.astype(np.float32), mv) for mv in levels}
        print("noise", kind, db, res, flush=True)
