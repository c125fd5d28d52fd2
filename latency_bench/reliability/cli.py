"""`diffvoice bench reliability`: run the reliability harness and write docs/reliability.md.

    diffvoice bench reliability --short            # every part, tiny scale (~1-2 min)
    diffvoice bench reliability --full --out docs/reliability.md
    diffvoice bench reliability --full --parts soak --out docs/reliability.md

Contract: `add_arguments(parser)` / `run(args) -> int` (registered under `bench` by
latency_bench/cli.py). Exit 0 when every check passed, 1 when any failed (the report is written
either way), 2 for bad arguments. Results merge into <out>.json, so parts can run separately.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
from pathlib import Path

from diffvoice.latency_bench.reliability.scales import PARTS, SCALES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--short", dest="scale", action="store_const", const="short",
                      help="tiny counts (what make test runs)")
    size.add_argument("--full", dest="scale", action="store_const", const="full",
                      help="the committed figures: 10,000 fuzz inputs, 10-minute soak, ...")
    parser.set_defaults(scale="short")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run, of {','.join(PARTS)}")
    parser.add_argument("--out", type=Path, default=Path("reliability.md"),
                        help="markdown report; results JSON beside it (.json)")
    parser.add_argument("--model", default=None, help="model dir (default: the embedded one)")
    parser.add_argument("--corpus-cache", default="~/.cache/diffvoice/bench-corpus",
                        help="where the espeak-ng prompts are cached")
    parser.add_argument("--soak-callers", type=int, default=None,
                        help="soak: concurrent callers instead of the scale's (32 full, 2 short); "
                        "to find what a machine sustains")
    parser.add_argument("--soak-s", type=float, default=None,
                        help="soak: seconds after the warm-up instead of the scale's")
    parser.add_argument("--input-frame-ms", type=int, default=None,
                        help="the server's --input-frame-ms (default: its own, 32)")
    parser.add_argument("--workers", type=int, default=None,
                        help="the server's --workers (default 1: one process)")


def run(args: argparse.Namespace) -> int:
    from diffvoice.engine import DEFAULT_MODEL_DIR
    from diffvoice.latency_bench.corpus import CorpusError, default_corpus
    from diffvoice.latency_bench.reliability.run import run_parts, write
    from diffvoice.voice.machine import machine_info

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = set(parts) - set(PARTS)
    if unknown:
        print(f"diffvoice bench reliability: unknown parts {sorted(unknown)}", file=sys.stderr)
        return 2
    scale = dict(SCALES[args.scale])
    for key in ("soak_callers", "soak_s"):
        value = getattr(args, key, None)
        if value is not None:
            if value <= 0 or (key == "soak_callers" and value % 2):
                print(f"diffvoice bench reliability: --{key.replace('_', '-')} must be "
                      f"{'an even number' if key == 'soak_callers' else 'a number'} > 0",
                      file=sys.stderr)
                return 2
            scale[key] = value
    if args.input_frame_ms is not None:
        scale["input_frame_ms"] = args.input_frame_ms
    scale["corpus_cache"] = str(Path(args.corpus_cache).expanduser())  # attacks' own prompts
    if args.workers is not None:
        if args.workers < 1:
            print("diffvoice bench reliability: --workers must be >= 1", file=sys.stderr)
            return 2
        scale["workers"] = args.workers
    try:
        prompts = default_corpus(Path(args.corpus_cache).expanduser(),
                                 voices=("en-us", "en-us+f3"), speeds=(175,))
    except CorpusError as e:
        print(f"diffvoice bench reliability: {e}", file=sys.stderr)
        return 2
    model = args.model or str(DEFAULT_MODEL_DIR)
    results = asyncio.run(run_parts(parts, scale, prompts, model))
    extra = [f"--{k.replace('_', '-')}={getattr(args, k)}"
             for k in ("soak_callers", "soak_s", "input_frame_ms", "workers")
             if getattr(args, k, None) is not None]
    command = shlex.join(["diffvoice", "bench", "reliability", f"--{args.scale}", "--parts",
                          ",".join(parts), *extra, "--out", str(args.out)])
    merged = write(results, args.out, command, machine_info())
    failed = [(name, c) for name in parts for c in merged["parts"][name]["checks"]
              if not c["ok"]]
    for name, c in failed:
        print(f"FAIL {name}: {c['name']}: {c['detail']}", file=sys.stderr)
    print(f"wrote {args.out} ({len(failed)} failed checks)")
    return 1 if failed else 0
