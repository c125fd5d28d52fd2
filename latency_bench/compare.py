"""Side-by-side Markdown of several `diffvoice.latency/1` voice reports (same sweep, one table).

    python -m diffvoice.latency_bench.compare single.json ray.json \
        --labels "one process,Ray 2 replicas" \
        --out docs/latency/ray-vs-single-cpu.md

For each concurrency level present in every report: turns, errors + timeouts, and per stage
n / p50 / p90 (p90 only from 20 samples up, else "n/a"), then the ratio of each report's p50 to
the first report's. Reads only the JSON; knows nothing about servers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

STAGES = ("voice_to_voice_ms", "llm_ttft_ms", "server_ms")
MIN_N_P90 = 20


def _fmt(value, n: int, min_n: int = 1) -> str:
    if value is None or n < min_n:
        return "n/a"
    return f"{value:,.0f}"


def render(reports: list[dict], labels: list[str]) -> str:
    levels = sorted(set.intersection(*({e["concurrency"] for e in r["sweep"]} for r in reports)))
    lines = []
    for stage in STAGES:
        lines += [f"### {stage}", "",
                  "| callers | server | turns | failed | n | p50 | p90 | p50 vs first |",
                  "|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
        for level in levels:
            base = None
            for report, label in zip(reports, labels, strict=True):
                entry = next(e for e in report["sweep"] if e["concurrency"] == level)
                s = entry["stages"].get(stage, {})
                n = s.get("count") or 0
                p50 = s.get("p50")
                if base is None:
                    base = p50
                ratio = f"{p50 / base:.2f}x" if p50 and base else "n/a"
                failed = (entry.get("errors") or 0) + (entry.get("timeouts") or 0)
                lines.append(f"| {level} | {label} | {entry['turns']} | {failed} | {n} | "
                             f"{_fmt(p50, n)} | {_fmt(s.get('p90'), n, MIN_N_P90)} | {ratio} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.latency_bench.compare",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="report JSON files")
    parser.add_argument("--labels", required=True, help="comma-separated, one per report")
    parser.add_argument("--out", type=Path, required=True, help="Markdown file to write")
    parser.add_argument("--title", default="Latency comparison", help="heading")
    parser.add_argument("--preamble", type=Path, default=None, help="Markdown put under it")
    args = parser.parse_args(argv)
    labels = [x.strip() for x in args.labels.split(",")]
    if len(labels) != len(args.reports):
        parser.error("--labels needs one label per report")
    reports = [json.loads(p.read_text()) for p in args.reports]
    head = [f"# {args.title}", ""]
    if args.preamble:
        head += [args.preamble.read_text().strip(), ""]
    args.out.write_text("\n".join(head) + render(reports, labels) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
