"""/ws vs /v1/realtime voice-to-voice on one server, alternating protocols block by block.

    python docs/perf-realtime/ab.py --blocks 2 --turns 30 --out docs/perf-realtime

One `diffvoice serve` (the embedded receptionist, pocketsphinx ASR: `bench voice`'s defaults
otherwise) on loopback; `diffvoice bench voice` is run `--blocks` times per protocol, browser
and realtime alternating (so drift in the machine's load falls on both), each block one session
of `--turns` turns on the same corpus. The per-turn stages of all blocks of a protocol are
pooled: p50 / p90 of voice_to_voice_ms, server_ms and (Realtime) speech_stopped_to_audio_ms,
written to ab.json and printed. The block reports stay beside it (ws-1.json, realtime-1.json...).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from diffvoice.latency_bench.server_proc import LocalServer

STAGES = ("voice_to_voice_ms", "server_ms", "speech_stopped_to_audio_ms")


def bench(protocol: str, url: str, turns: int, out: Path, log: Path, cache: Path) -> dict:
    cmd = [sys.executable, "-m", "diffvoice.engine.cli", "bench", "voice", "--protocol",
           protocol, "--url", url, "--concurrency", "1", "--turns", str(turns), "--min-turns",
           str(turns), "--out", str(out), "--no-progress", "--corpus-cache", str(cache),
           *(["--server-log", str(log)] if protocol == "realtime" else [])]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--blocks", type=int, default=2)
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--out", default="docs/perf-realtime")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "server-latency.jsonl"
    log.unlink(missing_ok=True)
    cache = Path("/tmp/diffvoice-ab-corpus")
    samples: dict[str, dict[str, list[float]]] = {"ws": {}, "realtime": {}}
    outcomes: dict[str, dict[str, int]] = {"ws": {}, "realtime": {}}
    started = time.time()
    with LocalServer(["--device", "cpu", "--asr", "pocketsphinx", "--latency-log", str(log)],
                     start_timeout_s=300) as server:
        for block in range(1, args.blocks + 1):
            for name, protocol, path in (("ws", "browser", "/ws"),
                                         ("realtime", "realtime", "/v1/realtime")):
                report = bench(protocol, server.ws_url(path), args.turns,
                               out / f"{name}-{block}.json", log, cache)
                for turn in report["turns"]:
                    outcomes[name][turn["status"]] = outcomes[name].get(turn["status"], 0) + 1
                    for stage, value in (turn.get("stages") or {}).items():
                        samples[name].setdefault(stage, []).append(value)
    result = {"command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
              "machine": {"cpus": 2, "platform": platform.platform(),
                          "python": platform.python_version()},
              "wall_s": round(time.time() - started, 1), "blocks": args.blocks,
              "turns_per_block": args.turns, "outcomes": outcomes, "stages": {}}
    for name, stages in samples.items():
        result["stages"][name] = {
            stage: {"n": len(v), "p50": round(float(np.percentile(v, 50)), 1),
                    "p90": round(float(np.percentile(v, 90)), 1)}
            for stage, v in stages.items() if stage in STAGES and v}
    ws, rt = result["stages"]["ws"], result["stages"]["realtime"]
    result["realtime_minus_ws_ms"] = {
        q: round(rt["voice_to_voice_ms"][q] - ws["voice_to_voice_ms"][q], 1)
        for q in ("p50", "p90")}
    (out / "ab.json").write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
