"""`diffvoice bench voice --matrix "drafting=off,on asr=pocketsphinx,tiny.en"`: one report over
a sweep of server configurations, same corpus, same seed, one run.

Contract: `run_matrix(config, prompts, corpus, notes, command) -> int` spawns one
`diffvoice serve` per `asr` value (`--asr VALUE` appended to --server-args) and, on each, runs
the concurrency sweep once per `drafting` value (off/on, sent as the session.start
`eager_drafts` override). It writes ONE report (schema diffvoice.latency/1) to `config.out`:
the top-level `stages`/`sweep`/`samples` are those of the headline variant (lowest
voice-to-voice p50 at the lowest concurrency among drafting=on variants, else among all), and
`matrix` lists every variant as {"asr", "drafting", "server", "sweep"} (each sweep point with
its stage summaries and `turn_stats`); `turns` holds every variant's per-turn records tagged
with `variant`. `analysis` gains the issue's goals checked against the headline variant.
Returns 0, or 1 if no turn was measured. Knows nothing about rendering (latency_bench.
matrix_table renders the `matrix` block).
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from diffvoice.latency_bench.config import BenchConfig, parse_matrix
from diffvoice.latency_bench.corpus import Prompt
from diffvoice.latency_bench.matrix_table import goal_lines

Variant = dict[str, Any]


def _v2v_p50(report: dict[str, Any]) -> float:
    summary = report["sweep"][0]["stages"].get("voice_to_voice_ms") or {}
    return summary.get("p50") if summary.get("p50") is not None else float("inf")


def pick_headline(variants: Sequence[Variant]) -> Variant:
    drafted = [v for v in variants if v["drafting"] == "on"]
    return min(drafted or variants, key=lambda v: _v2v_p50(v["report"]))


def combine(variants: Sequence[Variant], axes: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The single matrix report built from per-variant reports (see module docstring)."""
    if not variants:
        raise ValueError("a matrix report needs at least one variant")
    headline = pick_headline(variants)
    report = {k: v for k, v in headline["report"].items() if k != "turns"}
    report["config"] = {**report["config"], "matrix": {k: list(v) for k, v in axes.items()},
                        "headline": {"asr": headline["asr"], "drafting": headline["drafting"]}}
    report["matrix"] = [{"asr": v["asr"], "drafting": v["drafting"],
                         "server": v["report"]["config"].get("asr"),
                         "sweep": v["report"]["sweep"]} for v in variants]
    report["turns"] = [{**turn, "variant": {"asr": v["asr"], "drafting": v["drafting"]}}
                       for v in variants for turn in v["report"].get("turns", [])]
    report["analysis"] = goal_lines(report) + list(report.get("analysis", []))
    return report


def run_matrix(config: BenchConfig, prompts: Sequence[Prompt], corpus: dict[str, Any],
               notes: str | None, command: str | None) -> int:
    from tqdm import tqdm

    from diffvoice.latency_bench.load import make_report, run_sweep, total_turns
    from diffvoice.latency_bench.markdown import sweep_table
    from diffvoice.latency_bench.outputs import write_outputs
    from diffvoice.latency_bench.server_proc import LocalServer, ServerStartError, server_health

    if config.url is not None:
        print("diffvoice bench voice: --matrix starts its own servers; drop --url",
              file=sys.stderr)
        return 2
    axes = parse_matrix(config.matrix or "")
    asrs: tuple[str | None, ...] = axes.get("asr", (None,))
    draftings: tuple[str | None, ...] = axes.get("drafting", (None,))
    variants: list[Variant] = []
    per_variant = total_turns(config)
    with tqdm(total=per_variant * len(asrs) * len(draftings), unit="turn",
              disable=not config.progress, desc="bench voice matrix", file=sys.stderr) as bar:
        for asr in asrs:
            extra = config.server_args + (f" --asr {asr}" if asr else "")
            try:
                with LocalServer(extra, config.server_start_timeout_s) as server:
                    url = server.ws_url("/ws")
                    health = server_health(url)
                    for drafting in draftings:
                        eager = None if drafting is None else drafting == "on"
                        variant_config = dataclasses.replace(config, matrix=None,
                                                             eager_drafts=eager)
                        bar.set_description(f"asr={asr} drafting={drafting}")
                        levels = asyncio.run(run_sweep(variant_config, url, prompts, bar))
                        report = make_report(variant_config, levels, url=url, corpus=corpus,
                                             command=command, server=health, notes=notes)
                        variants.append({"asr": asr or health.get("asr"),
                                         "drafting": drafting or "server default",
                                         "report": report})
            except ServerStartError as exc:
                print(f"diffvoice bench voice: asr={asr}: {exc}", file=sys.stderr)
                return 1
    report = combine(variants, axes)
    written = write_outputs(report, config.out)
    for v in variants:
        print(f"asr={v['asr']} drafting={v['drafting']}")
        print("\n".join(sweep_table(v["report"], ["voice_to_voice_ms", "endpointing_ms"])))
    for line in report.get("analysis", []):
        print("-", line)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    measured = sum(1 for t in report["turns"] if t.get("status") == "ok")
    return 0 if measured else 1
