"""`diffvoice bench voice --matrix "drafting=off,on asr=pocketsphinx,tiny.en smart_turn=off,on
stop_secs=0.2,0.4"`: one report over a sweep of server configurations, same corpus, same seed,
one run.

Contract: `run_matrix(config, prompts, corpus, notes, command) -> int` spawns one
`diffvoice serve` per combination of the server axes (`server_axes`: asr -> `--asr VALUE`,
smart_turn -> `--smart-turn` / `--no-smart-turn`, and over Twilio stop_secs -> `--stop-secs
VALUE`, appended to --server-args) and, on each, runs the concurrency sweep once per
combination of the session axes (drafting -> the session.start `eager_drafts` override; over
the browser protocol stop_secs -> the session.start `stop_secs` override). It writes ONE report
(schema diffvoice.latency/1) to `config.out`: the top-level `stages`/`sweep`/`samples` are those
of the headline variant (`pick_headline`), and `matrix` lists every variant as {"asr",
"smart_turn", "drafting", "stop_secs", "server", "sweep"} (each sweep point with its stage
summaries and `turn_stats`; an axis not swept reads as the server's value where it reports
one, else "server default"); `turns` holds every variant's per-turn records tagged with
`variant` (those four labels); `cutoff_2pct` is latency_bench.turn_taking.cutoff_points over
the variants. `analysis` gains the issue's goals checked against the headline variant.
Returns 0, or 1 if no turn was measured. Knows nothing about rendering (latency_bench.
matrix_table renders the `matrix` block).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sys
from collections.abc import Sequence
from typing import Any

from diffvoice.latency_bench.config import BenchConfig, parse_matrix
from diffvoice.latency_bench.corpus import Prompt
from diffvoice.latency_bench.matrix_table import goal_lines
from diffvoice.latency_bench.turn_taking import CUTOFF_GOAL, LABELS, cutoff_points

Variant = dict[str, Any]


def server_axes(axes: dict[str, tuple[str, ...]], protocol: str) -> tuple[list[str], list[str]]:
    """(axes that need a server each, axes set per session), in MATRIX_AXES order."""
    per_server = {"asr", "smart_turn"} | ({"stop_secs"} if protocol == "twilio" else set())
    return ([a for a in axes if a in per_server], [a for a in axes if a not in per_server])


def combinations(axes: dict[str, tuple[str, ...]], names: Sequence[str]) -> list[dict[str, str]]:
    """Every combination of the named axes' values, first axis slowest; [{}] for no axes."""
    return [dict(zip(names, values, strict=True))
            for values in itertools.product(*(axes[n] for n in names))]


def server_flags(combo: dict[str, str]) -> str:
    flags = []
    if "asr" in combo:
        flags.append(f"--asr {combo['asr']}")
    if "smart_turn" in combo:
        flags.append("--smart-turn" if combo["smart_turn"] == "on" else "--no-smart-turn")
    if "stop_secs" in combo:
        flags.append(f"--stop-secs {combo['stop_secs']}")
    return " ".join(flags)


def session_config(config: BenchConfig, combo: dict[str, str]) -> BenchConfig:
    """`config` for one session combination: the matrix gone, its overrides set."""
    changes: dict[str, Any] = {"matrix": None}
    if "drafting" in combo:
        changes["eager_drafts"] = combo["drafting"] == "on"
    if "stop_secs" in combo:
        changes["stop_secs"] = float(combo["stop_secs"])
    return dataclasses.replace(config, **changes)


def _lowest(report: dict[str, Any]) -> dict[str, Any]:
    return report["sweep"][0]


def _v2v_p50(report: dict[str, Any]) -> float:
    summary = _lowest(report)["stages"].get("voice_to_voice_ms") or {}
    return summary.get("p50") if summary.get("p50") is not None else float("inf")


def _cut_off_ok(report: dict[str, Any]) -> bool:
    stats = _lowest(report).get("turn_stats") or {}
    rate = stats.get("paused_premature_rate")
    rate = stats.get("premature_eot_rate") if rate is None else rate
    return rate is not None and rate <= CUTOFF_GOAL


def pick_headline(variants: Sequence[Variant]) -> Variant:
    """Among the drafting=on variants (all, if none), those whose false cut-off rate at the
    lowest concurrency is <= 2 % (paused turns where there are any; all of them, if none
    is), the one with the lowest voice-to-voice p50 there."""
    drafted = [v for v in variants if v["drafting"] == "on"] or list(variants)
    safe = [v for v in drafted if _cut_off_ok(v["report"])] or drafted
    return min(safe, key=lambda v: _v2v_p50(v["report"]))


def _labels(variant: Variant) -> dict[str, Any]:
    return {k: variant[k] for k in LABELS}


def combine(variants: Sequence[Variant], axes: dict[str, tuple[str, ...]]) -> dict[str, Any]:
    """The single matrix report built from per-variant reports (see module docstring)."""
    if not variants:
        raise ValueError("a matrix report needs at least one variant")
    headline = pick_headline(variants)
    report = {k: v for k, v in headline["report"].items() if k != "turns"}
    report["config"] = {**report["config"], "matrix": {k: list(v) for k, v in axes.items()},
                        "headline": _labels(headline)}
    report["matrix"] = [{**_labels(v), "server": v["report"]["config"].get("asr"),
                         "sweep": v["report"]["sweep"]} for v in variants]
    report["turns"] = [{**turn, "variant": _labels(v)}
                       for v in variants for turn in v["report"].get("turns", [])]
    report["cutoff_2pct"] = cutoff_points(report["matrix"])
    report["analysis"] = goal_lines(report) + list(report.get("analysis", []))
    return report


def _variant(combo: dict[str, str], report: dict[str, Any]) -> Variant:
    stop_secs = combo.get("stop_secs")
    return {"asr": combo.get("asr") or report["config"].get("asr"),
            "smart_turn": combo.get("smart_turn", "server default"),
            "drafting": combo.get("drafting", "server default"),
            "stop_secs": float(stop_secs) if stop_secs is not None
            else report["config"].get("stop_secs"),
            "report": report}


def run_matrix(config: BenchConfig, prompts: Sequence[Prompt], corpus: dict[str, Any],
               notes: str | None, command: str | None) -> int:
    from tqdm import tqdm

    from diffvoice.latency_bench.load import make_report, run_sweep, total_turns
    from diffvoice.latency_bench.markdown import sweep_table
    from diffvoice.latency_bench.outputs import write_outputs
    from diffvoice.latency_bench.server_proc import ServerStartError, bench_server, server_health
    from diffvoice.latency_bench.server_records import attach_server_records

    if config.url is not None:
        print("diffvoice bench voice: --matrix starts its own servers; drop --url",
              file=sys.stderr)
        return 2
    axes = parse_matrix(config.matrix or "")
    on_server, per_session = server_axes(axes, config.protocol)
    servers, sessions = combinations(axes, on_server), combinations(axes, per_session)
    variants: list[Variant] = []
    with tqdm(total=total_turns(config) * len(servers) * len(sessions), unit="turn",
              disable=not config.progress, desc="bench voice matrix", file=sys.stderr) as bar:
        for server_combo in servers:
            extra = " ".join(filter(None, (config.server_args, server_flags(server_combo))))
            server = None
            try:
                server, token = bench_server(config.protocol, extra,
                                             config.server_start_timeout_s,
                                             config.twilio_auth_token)
                with server:
                    url = server.bench_url(config.protocol)
                    health = server_health(url)
                    for session_combo in sessions:
                        combo = {**server_combo, **session_combo}
                        variant_config = session_config(config, session_combo)
                        if token is not None:
                            variant_config = dataclasses.replace(variant_config,
                                                                 twilio_auth_token=token)
                        bar.set_description(" ".join(f"{k}={v}" for k, v in combo.items()))
                        levels = asyncio.run(run_sweep(variant_config, url, prompts, bar))
                        if server.latency_log is not None:  # Twilio: the turns' server records
                            attach_server_records(levels, server.latency_log)
                        report = make_report(variant_config, levels, url=url, corpus=corpus,
                                             command=command, server=health, notes=notes)
                        variants.append(_variant(combo, report))
            except ServerStartError as exc:
                print(f"diffvoice bench voice: {server_flags(server_combo)}: {exc}",
                      file=sys.stderr)
                return 1
            finally:
                if server is not None and server.owns_latency_log:
                    server.latency_log.unlink(missing_ok=True)
    report = combine(variants, axes)
    written = write_outputs(report, config.out)
    for v in variants:
        print(" ".join(f"{k}={v[k]}" for k in LABELS))
        print("\n".join(sweep_table(v["report"], ["voice_to_voice_ms", "endpointing_ms"])))
    for line in report.get("analysis", []):
        print("-", line)
    print("wrote " + ", ".join(str(p) for p in written.values()))
    measured = sum(1 for t in report["turns"] if t.get("status") == "ok")
    return 0 if measured else 1
