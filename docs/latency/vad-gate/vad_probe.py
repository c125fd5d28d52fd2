"""Per 32 ms window: Silero's confidence, pipecat's smoothed volume and the VAD state for one
slot answer, wideband or through the phone path (16 k -> 8 k -> mu-law -> 8 k -> 16 k), at
pipecat's gate (min_volume 0.6): `python vad_probe.py yes en-gb+m3 150 phone|wide`."""
import sys
from pathlib import Path

import numpy as np
import soxr
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams

from diffvoice.latency_bench.corpus import SLOT_DIALOGUES, dialogue_prompts
from diffvoice.latency_bench.speakers import espeak_speakers
from diffvoice.voice.telephony import mulaw

word, voice, speed, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
dialogues = [d for d in SLOT_DIALOGUES if d[1] == word]
prompts = dialogue_prompts(dialogues, espeak_speakers([voice], [speed]),
                           Path("~/.cache/diffvoice/bench-corpus").expanduser())
p = [q for q in prompts if q.step == 1][0]
x = p.pcm.astype(np.float32) / 32768
if path == "phone":
    y = soxr.resample(x, 16000, 8000)
    y = (np.clip(y, -1, 1) * 32767).astype(np.int16)
    y = mulaw.decode(mulaw.encode(y)) if hasattr(mulaw, "decode") else y
    y = np.frombuffer(y, np.int16) if isinstance(y, (bytes, bytearray)) else y
    x = soxr.resample(y.astype(np.float32) / 32768, 8000, 16000)
pcm = (np.clip(x, -1, 1) * 32767).astype(np.int16)
vad = SileroVADAnalyzer(sample_rate=16000, params=VADParams(stop_secs=0.2))
vad.set_sample_rate(16000)
confs = []
orig_vol = vad._get_smoothed_volume
vols = []
def vol(a):
    v = orig_vol(a)
    vols.append(float(np.asarray(v).ravel()[0]))
    return v
vad._get_smoothed_volume = vol
orig_conf = vad.voice_confidence
def conf(b):
    c = orig_conf(b)
    confs.append(float(np.asarray(c).ravel()[0]))
    return c
vad.voice_confidence = conf
states = []
for i in range(0, len(pcm) - 512, 512):
    states.append(vad._run_analyzer(pcm[i:i + 512].tobytes()).name)
print(word, voice, speed, path, "peak dBFS", round(20 * np.log10(np.abs(pcm).max() / 32768), 1))
for i, (c, v, s) in enumerate(zip(confs, vols, states, strict=True)):
    if c > 0.2 or v > 0.3:
        print(f"{i*32:5d} ms conf {c:.2f} vol {v:.2f} {s}")
