"""Where the engine's time goes on a device: host (Python, launches) against GPU kernels.

    python -m diffvoice.latency_bench.engine_profile --out DIR [--preset qwen2.5-1.5b] \
        [--device cuda] [--dtype bfloat16] [--batch 1,32]

Builds the random-weight preset as `bench engine` does, decodes with the engine's own decoding
(16-token blocks, 2 low-confidence passes each, CUDA graphs on), warms up on every prompt at each
batch level (so no capture or compile falls inside the profile), then profiles one wave of
requests per level with torch.profiler. The engine decodes on its own Python thread, where
torch.profiler records no CPU operators; the device's kernels are recorded process-wide (CUPTI),
so what this reports is device time against wall time. Writes DIR/profile.json (per level: wall
seconds, passes, tokens, milliseconds per pass, device-kernel seconds summed over all kernels and
their share of the wall time, the top kernels by device time) and DIR/profile-b{N}.txt (torch's
table). A device share far below 1 means the engine is host-bound: the GPU waits on Python
between passes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.latency_bench.engine_bench import _ints, measure
from diffvoice.latency_bench.engine_workload import PRESETS, prompt_messages, random_model


def _top(events, key: str, n: int = 15) -> list[dict]:
    rows = sorted(events, key=lambda e: getattr(e, key), reverse=True)[:n]
    return [{"op": e.key, "calls": e.count, "self_device_ms": e.self_device_time_total / 1e3}
            for e in rows]


def profile_level(engine: Engine, chats, params: SamplingParams, batch: int, device: str,
                  out_dir: Path) -> dict:
    wave = (chats * batch)[:batch] if batch > 1 else chats[:5]
    passes0 = engine.stats()["passes"]
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(activities=activities) as prof:
        t0 = time.perf_counter()
        r = asyncio.run(measure(engine, wave, params, batch))
        wall = time.perf_counter() - t0
    events = prof.key_averages()
    device_s = sum(e.self_device_time_total for e in events) / 1e6
    passes = engine.stats()["passes"] - passes0
    (out_dir / f"profile-b{batch}.txt").write_text(
        events.table(sort_by="self_device_time_total", row_limit=40) + "\n")
    return {"batch": batch, "requests": len(wave), "wall_s": wall, "passes": passes,
            "tokens": r["tokens"], "ms_per_pass": 1e3 * wall / max(passes, 1),
            "device_kernel_s": device_s, "device_share_of_wall": device_s / wall,
            "ttft_ms_p50": sorted(r["ttft"])[len(r["ttft"]) // 2],
            "top_self_device": _top(events, "self_device_time_total")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.latency_bench.engine_profile",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="qwen2.5-1.5b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch", type=_ints, default=[1, 32])
    parser.add_argument("--block-size", type=int, default=16)
    parser.add_argument("--prompts", type=int, default=20)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    loaded = random_model(args.preset, device, dtype, 0,
                          Path(tempfile.mkdtemp(prefix="diffvoice-profile-tokenizer-")))
    params = SamplingParams(max_new_tokens=32, steps_per_block=2, block_size=args.block_size,
                            policy="low_confidence", ignore_eos=True, decoding="fast")
    chats = prompt_messages(loaded.tokenizer, args.prompts, None)
    engine = Engine(loaded, EngineConfig(max_running=max(args.batch), max_seq_len=512,
                                         max_queued=4 * max(*args.batch, args.prompts)))
    levels = []
    try:
        for b in sorted(set(args.batch)):
            asyncio.run(measure(engine, (chats * b)[: max(len(chats), b)], params, b))  # warm
            levels.append(profile_level(engine, chats, params, b, device.type, args.out))
            print(json.dumps({k: v for k, v in levels[-1].items() if not k.startswith("top")}),
                  flush=True)
    finally:
        engine.close()
    report = {"command": "python -m diffvoice.latency_bench.engine_profile "
                         + " ".join(argv if argv is not None else __import__("sys").argv[1:]),
              "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
              "torch": torch.__version__, "preset": args.preset, "dtype": args.dtype,
              "params": {"decoding": "fast", "policy": "low_confidence", "steps_per_block": 2,
                         "block_size": args.block_size, "answer_tokens": 32},
              "levels": levels}
    (args.out / "profile.json").write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
