"""TTS speed on this machine: first-audio latency and real-time factor, espeak-ng vs Kokoro.

    python -m diffvoice.latency_bench.tts_bench [--tts espeak,kokoro] [--repeats 3] [--out F.json]

For each voice, a fixed 4-sentence receptionist reply is synthesized sentence by sentence the
way the pipeline does it (pipecat's sentence aggregator hands the TTS one sentence at a time):
- first_audio_ms: start of the reply -> first audio of its first sentence (Kokoro: the first
  chunk of kokoro-onnx's `create_stream`, the path PackagedKokoroTTSService takes; espeak-ng:
  its whole first sentence, as EspeakTTSService synthesizes a clause at once);
- rtf: synthesis seconds / audio seconds over the whole reply (< 1: faster than real time).
Also the one-off model load time. The median over `--repeats` runs (after one warm-up run) is
reported with every run's values. Knows nothing about the server; Kokoro needs the
`diffvoice[kokoro]` packages.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

REPLY = ("We open at nine in the morning on Saturdays. A cleaning costs ninety five dollars. "
         "We are at 42 Harbor Street, next to the library. Would you like to book a visit?")


def _sentences(text: str) -> list[str]:
    out, current = [], ""
    for word in text.split():
        current = f"{current} {word}".strip()
        if word.endswith((".", "?", "!")):
            out.append(current)
            current = ""
    return out + ([current] if current else [])


def _espeak_run() -> dict:
    from diffvoice.voice.tts.espeak import Espeak

    es = Espeak.shared()
    start = time.perf_counter()
    first, samples = None, 0
    for sentence in _sentences(REPLY):
        pcm = es.synthesize(sentence, "en-us", 175, lambda: False)
        if first is None:
            first = time.perf_counter() - start
        samples += len(pcm) // 2
    total = time.perf_counter() - start
    return {"first_audio_ms": first * 1000, "rtf": total / (samples / es.sample_rate),
            "audio_s": samples / es.sample_rate, "synth_s": total}


def _kokoro_run(voice: str, threads: int) -> dict:
    from diffvoice.voice.tts.kokoro_model import shared_kokoro

    kokoro = shared_kokoro(threads)

    async def run() -> dict:
        start = time.perf_counter()
        first, samples, rate = None, 0, 24000
        for sentence in _sentences(REPLY):
            stream = kokoro.create_stream(sentence, voice=voice, lang="en-us")
            async for chunk, chunk_rate in stream:
                rate = chunk_rate
                if first is None:
                    first = time.perf_counter() - start
                samples += len(chunk)
        total = time.perf_counter() - start
        return {"first_audio_ms": first * 1000, "rtf": total / (samples / rate),
                "audio_s": samples / rate, "synth_s": total}

    return asyncio.run(run())


def measure(kind: str, repeats: int, voice: str, threads: int) -> dict:
    load_start = time.perf_counter()
    if kind == "kokoro":
        from diffvoice.voice.tts.kokoro_model import shared_kokoro

        shared_kokoro(threads)
        run = lambda: _kokoro_run(voice, threads)  # noqa: E731
    else:
        from diffvoice.voice.tts.espeak import Espeak

        Espeak.shared()
        run = _espeak_run
    load_s = time.perf_counter() - load_start
    run()  # warm-up (first-call allocations, phonemizer start)
    runs = [run() for _ in range(repeats)]
    return {"tts": kind, "voice": voice if kind == "kokoro" else "en-us",
            "threads": threads if kind == "kokoro" else 1, "load_s": round(load_s, 3),
            "first_audio_ms": round(statistics.median(r["first_audio_ms"] for r in runs), 1),
            "rtf": round(statistics.median(r["rtf"] for r in runs), 3),
            "audio_s": round(runs[0]["audio_s"], 2), "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.latency_bench.tts_bench",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tts", default="espeak,kokoro", help="comma-separated: espeak, kokoro")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per voice")
    parser.add_argument("--voice", default="jf_alpha", help="Kokoro voice")
    parser.add_argument("--threads", type=int, default=0,
                        help="onnxruntime threads for Kokoro (0: all cores)")
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here too")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be >= 1")
    results = [measure(kind.strip(), args.repeats, args.voice, args.threads)
               for kind in args.tts.split(",") if kind.strip()]
    report = {"command": "python -m diffvoice.latency_bench.tts_bench " + " ".join(
                  sys.argv[1:] if argv is None else argv),
              "reply": REPLY, "cpus": os.cpu_count(), "machine": platform.platform(terse=True),
              "results": results}
    text = json.dumps(report, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
