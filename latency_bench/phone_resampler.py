"""Which soxr quality should turn a Twilio caller's 8 kHz audio into the pipeline's 16 kHz?

    python -m diffvoice.latency_bench.phone_resampler --out docs/latency/phone-resampler.json \
        [--qualities VHQ,LQ,QQ] [--per-speaker 6] [--seed 0] [--kokoro-voices jm_kumo,jf_gongitsune]

For each quality, every utterance of the turn corpus (latency_bench.asr_bench's `--corpus turns`
speakers and seeded subsets) goes through the phone path exactly as the server hears it
(phone_path.phone_ticks: the Twilio load client's 8 kHz mu-law, decoded by the server's own
CallSerializer with that resampler quality) and reports:
- `held_ms`: audio the stream resampler has been given but not yet released, sampled after every
  20 ms media message (median, p90, max over all messages): it delays everything downstream, the
  VAD hearing the caller stop first of all;
- `wer`: faster-whisper tiny.en on the whole released utterance, one pass (the recogniser the
  server runs; one pass, not the streaming policy, so only the audio differs), corpus WER per
  split (espeak-ng development voices, Kokoro hold-out voices) and over all.
Everything runs faster than real time; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

from diffvoice.latency_bench import asr_bench, phone_path
from diffvoice.latency_bench.wer import word_edits


async def measure(qualities: list[str], prompts, runner) -> dict:
    out = {}
    for quality in qualities:
        held, edits = [], {"development": [0, 0], "hold-out": [0, 0]}
        for speaker, prompt in prompts:
            heard = np.concatenate([prompt.pcm, np.zeros(8000, np.int16)])
            ticks = await phone_path.phone_ticks(heard, quality)
            released = np.cumsum([len(t) for t in ticks])
            held += list((np.arange(1, len(ticks) + 1) * 320 - released) / 16.0)
            audio = np.concatenate(ticks).astype(np.float32) / 32768.0
            text = runner.run(audio, None).text
            e, n = word_edits(prompt.text, text)
            counts = edits[asr_bench.split_of(speaker)]
            counts[0], counts[1] = counts[0] + e, counts[1] + n
        total_e = sum(e for e, _ in edits.values())
        total_n = sum(n for _, n in edits.values())
        out[quality] = {
            "held_ms": {"p50": float(np.percentile(held, 50)),
                        "p90": float(np.percentile(held, 90)), "max": float(np.max(held))},
            "wer": {split: round(e / n, 4) if n else None for split, (e, n) in edits.items()}
            | {"all": round(total_e / total_n, 4)},
            "utterances": len(prompts),
        }
        print(quality, json.dumps(out[quality]), file=sys.stderr)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/latency/phone-resampler.json")
    parser.add_argument("--qualities", default="VHQ,LQ,QQ")
    parser.add_argument("--per-speaker", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--kokoro-voices", default="jm_kumo,jf_gongitsune")
    parser.add_argument("--kokoro-speeds", default="1.0,1.15")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "diffvoice" / "asr"))
    args = parser.parse_args(argv)

    from diffvoice.latency_bench.corpus import spoken_prompts
    from diffvoice.latency_bench.speakers import Synth
    from diffvoice.voice.asr.resolve import resolve_asr
    from diffvoice.voice.asr.whisper_pass import WhisperPassRunner

    corpus = argparse.Namespace(corpus="turns", voices="", kokoro_voices=args.kokoro_voices,
                                kokoro_speeds=args.kokoro_speeds, per_speaker=args.per_speaker,
                                seed=args.seed)
    synth, prompts = Synth(), []
    for speaker, texts in asr_bench.speakers_and_texts(corpus):
        for p in spoken_prompts(texts, [speaker], Path(args.cache), lead_silence_s=0.3,
                                synth=synth):
            prompts.append((speaker, p))
    runner = WhisperPassRunner(resolve_asr("whisper-tiny.en", "cpu").model)
    started = time.time()
    results = asyncio.run(measure(args.qualities.split(","), prompts, runner))
    report = {
        "kind": "phone-resampler",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "command": " ".join(["python -m diffvoice.latency_bench.phone_resampler", *sys.argv[1:]]),
        "machine": {"cpu": platform.processor() or platform.machine(),
                    "python": platform.python_version()},
        "asr": "whisper:tiny.en, one pass over the released utterance",
        "results": results,
    }
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
