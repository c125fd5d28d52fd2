"""Where one Whisper pass spends its time on this machine, per decoding setup and audio length.

    python -m diffvoice.latency_bench.whisper_profile [--model whisper-tiny.en] [--threads 2] \
        [--reps 5]

For speech of ~1, 2, 4 and 8 s (espeak-ng receptionist questions joined), times the median of
`reps` runs of:
- `transcribe-default`: faster-whisper's `WhisperModel.transcribe` with its defaults (beam 5,
  timestamps, conditioning on previous text; 30 s window) — what a naive integration pays;
- `transcribe-greedy`: `transcribe` with beam_size=1, without_timestamps, temperature 0,
  condition_on_previous_text=False, vad_filter=False, max_new_tokens=96 (the old WhisperSTT);
- `pass-full`: voice.asr.whisper_pass with the 30 s encoder window, split into features /
  encoder / decoder;
- `pass-auto`: the same with the encoder window cut to the audio + 1 s (at least 3 s);
- `pass-auto+prefix`: pass-auto with the first half of the words forced as the prefix (what a
  streaming pass does once local agreement confirmed them).
Prints one JSON object per line; `--out` also writes them as a JSON list.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

SENTENCES = [
    "what time do you open on saturday",
    "can i book a cleaning on monday at ten",
    "do you have anything available on wednesday afternoon",
    "how much does teeth whitening cost",
]


def _speech(seconds: float, cache: Path) -> tuple[np.ndarray, str]:
    from diffvoice.latency_bench.corpus import synthesize_corpus

    prompts = synthesize_corpus(SENTENCES, ["en-us"], [160], cache, lead_silence_s=0.1)
    pcm, text = np.zeros(0, np.int16), []
    for p in prompts * 4:
        if len(pcm) >= seconds * 16000:
            break
        pcm = np.concatenate([pcm, p.pcm])
        text.append(p.text)
    return pcm.astype(np.float32) / 32768.0, " ".join(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="whisper-tiny.en", help="packaged name or CT2 dir")
    parser.add_argument("--threads", type=int, default=2, help="CTranslate2 cpu_threads")
    parser.add_argument("--reps", type=int, default=5, help="runs per setup (median)")
    parser.add_argument("--seconds", default="1,2,4,8", help="speech lengths")
    parser.add_argument("--out", default=None, help="also write the rows here as JSON")
    args = parser.parse_args(argv)

    import os

    from faster_whisper import WhisperModel

    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir
    from diffvoice.voice.asr.whisper_pass import PassOptions, WhisperPassRunner

    path = packaged_whisper_dir(args.model) or Path(args.model)
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=args.threads)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice" / "asr"
    full = WhisperPassRunner(model, PassOptions(audio_ctx="full"))
    auto = WhisperPassRunner(model, PassOptions())

    def transcribe(audio, **kw):
        segments, _ = model.transcribe(audio, language="en", **kw)
        return " ".join(s.text.strip() for s in segments)

    greedy = dict(
        beam_size=1, without_timestamps=True, temperature=0.0,
        condition_on_previous_text=False, vad_filter=False, max_new_tokens=96,
    )  # fmt: skip
    rows = []
    for seconds in [float(s) for s in args.seconds.split(",")]:
        audio, ref = _speech(seconds, cache)
        prefix = " ".join(ref.split()[: len(ref.split()) // 2])
        setups = {
            "transcribe-default": lambda a=audio: (transcribe(a), None),
            "transcribe-greedy": lambda a=audio: (transcribe(a, **greedy), None),
            "pass-full": lambda a=audio: (None, full.run(a)),
            "pass-auto": lambda a=audio: (None, auto.run(a)),
            "pass-auto+prefix": lambda a=audio, p=prefix: (None, auto.run(a, prefix=p)),
        }
        for name, fn in setups.items():
            fn()  # warm-up
            runs = []
            for _ in range(args.reps):
                t = time.perf_counter()
                text, result = fn()
                runs.append((time.perf_counter() - t, text, result))
            total = statistics.median(r[0] for r in runs) * 1000
            row = {"setup": name, "audio_s": round(len(audio) / 16000, 2), "ms": round(total, 1)}
            results = [r[2] for r in runs if r[2] is not None]
            if results:
                for stage in ("features_ms", "encode_ms", "decode_ms"):
                    row[stage] = round(statistics.median(getattr(r, stage) for r in results), 1)
                row["encoder_frames"] = results[0].encoder_frames
            row["text"] = runs[-1][1] if runs[-1][1] is not None else runs[-1][2].text
            row["threads"] = args.threads
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
