"""Markdown rendering of a latency report (schema diffvoice.latency/1).

Contract: `render_markdown(report, image_names=None) -> str` is a pure function of the report
dict: a header naming what was measured (machine, model, ASR/TTS, stop_secs, ...), a compact
p50/p99-versus-concurrency table (with n, and, when the report has per-turn records, ASR WER
and task success beside it) with the human `notes` paragraph and the machine-written
`analysis` lines right under it, the turn-taking section (latency_bench.turn_table: false
cut-offs per pause length, slot answers, hold-out voices, the 2 % point) when the report has
turn-taking figures, one table per concurrency level (stage x
count/mean/p50/p90/p95/p99/max, plus turns, errors and timeouts) and, when given, links to the
PNG plots. Values are milliseconds with no decimals; a stage never measured prints as "–",
never as 0; a percentile with too few samples (report.PERCENTILE_MIN_SAMPLES) prints "n/a".
In --url mode the server's own machine/versions (from its /healthz) come first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diffvoice.latency_bench.matrix_table import matrix_lines, turn_stats_lines
from diffvoice.latency_bench.quality import has_turns, sweep_quality
from diffvoice.latency_bench.report import (
    SAMPLE_SIZE_RULE,
    STAGE_DESCRIPTIONS,
    enough_samples,
    stage_names,
    sweep_tail,
)
from diffvoice.latency_bench.stats import SUMMARY_FIELDS
from diffvoice.latency_bench.turn_table import turn_taking_lines

# config keys shown in the header, in this order, when present
_HEADER_KEYS: tuple[tuple[str, str], ...] = (
    ("model", "model"), ("asr", "ASR"), ("tts", "TTS"), ("stop_secs", "stop_secs"),
    ("protocol", "protocol"), ("url", "server"), ("corpus", "prompts"),
    ("turns_per_session", "turns per session"), ("command", "command"),
)


def fmt_ms(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f}"


def fmt_stat(summary: Mapping[str, Any] | None, name: str) -> str:
    """One summary cell: "–" never measured, "n/a" too few samples for that percentile."""
    if not summary or not summary.get("count"):
        return "–"
    if not enough_samples(summary, name):
        return "n/a"
    return fmt_ms(summary[name])


def fmt_fraction(value: float | None, n: int) -> str:
    return "–" if value is None else f"{100 * value:.0f}% ({n})"


def _fmt_config_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_fmt_nested(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


def _fmt_nested(value: Any) -> str:
    return "/".join(str(v) for v in value) if isinstance(value, list | tuple) else str(value)


def _header(report: Mapping[str, Any]) -> list[str]:
    config = report["config"]
    title = f"# Latency report: {report.get('kind', 'latency')}"
    lines = [title, ""]
    if "created" in report:
        lines.append(f"- created: {report['created']}")
    for key, label in _HEADER_KEYS:
        if key in config and config[key] is not None:
            value = _fmt_config_value(config[key])
            lines.append(f"- {label}: `{value}`" if key == "command" else f"- {label}: {value}")
    server = config.get("server") if isinstance(config.get("server"), Mapping) else {}
    for key in ("machine", "versions"):   # the server's own description (its /healthz)
        if isinstance(server.get(key), Mapping):
            lines.append(f"- server {key}: {_fmt_config_value(server[key])}")
    # the machine this report was produced on: the load generator when a server described
    # itself (--url mode), else the one machine that ran both
    where = "load generator " if server else ""
    machine = config.get("machine")
    if isinstance(machine, Mapping):
        lines.append(f"- {where}machine: {_fmt_config_value(machine)}")
    versions = config.get("versions")
    if isinstance(versions, Mapping):
        lines.append(f"- {where}versions: {_fmt_config_value(versions)}")
    lines.append("")
    return lines


def _stage_table(stages: Mapping[str, Mapping[str, Any]], names: Sequence[str]) -> list[str]:
    head = "| stage | " + " | ".join(SUMMARY_FIELDS) + " |"
    rule = "|---|" + "---:|" * len(SUMMARY_FIELDS)
    rows = [head, rule]
    for name in names:
        summary = stages.get(name)
        if summary is None:
            continue
        cells = [str(summary["count"])] + [fmt_stat(summary, f) for f in SUMMARY_FIELDS[1:]]
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return rows


def sweep_table(report: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    """p50 / tail (n) per stage and level, the tail being the highest percentile every level's
    sample supports (report.sweep_tail: p99 from 100 turns, else p95, p90 or max); with
    per-turn records, the answer quality beside it: ASR word error rate against the prompt text
    and task success (n = turns judged)."""
    quality = sweep_quality(report) if has_turns(report) else None
    extra = ["ASR WER (n)", "task success (n)"] if quality else []
    tail = sweep_tail(report)
    rows = ["| concurrency | turns | errors | timeouts | "
            + " | ".join([f"{n} p50 / {tail} (n)" for n in names] + extra) + " |",
            "|---:|---:|---:|---:|" + "---:|" * (len(names) + len(extra))]
    for point in report["sweep"]:
        cells = [str(point["concurrency"]), str(point.get("turns", "–")),
                 str(point.get("errors", "–")), str(point.get("timeouts", "–"))]
        for name in names:
            summary = point["stages"].get(name)
            cells.append("–" if summary is None or summary["count"] == 0 else
                         f"{fmt_stat(summary, 'p50')} / {fmt_stat(summary, tail)} "
                         f"({summary['count']})")
        if quality:
            q = quality[point["concurrency"]]
            cells += [fmt_fraction(q["wer"], q["wer_turns"]),
                      fmt_fraction(q["task_success"], q["task_turns"])]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def render_markdown(report: Mapping[str, Any],
                    image_names: Mapping[str, str] | None = None) -> str:
    names = stage_names(report)
    lines = _header(report)
    described = [n for n in names if n in STAGE_DESCRIPTIONS]
    if described:
        lines.append("Stages (milliseconds):")
        lines.append("")
        lines += [f"- `{n}`: {STAGE_DESCRIPTIONS[n]}" for n in described]
        lines.append("")
    lines += matrix_lines(report)
    lines += [f"## p50 / {sweep_tail(report)} versus concurrency", ""]
    lines += sweep_table(report, names) + [""]
    lines += [f"*Sample size: {SAMPLE_SIZE_RULE}.*", ""]
    if has_turns(report):
        lines += ["*Quality: ASR WER = word error rate of the final transcript against the "
                  "prompt's text; task success = answers that state the prompt's expected "
                  "fact (latency_bench/quality.py); n = turns judged.*", ""]
    if report.get("notes"):
        lines += [str(report["notes"]).strip(), ""]
    if report.get("analysis"):
        lines += ["Computed from the samples:", ""]
        lines += [f"- {line}" for line in report["analysis"]] + [""]
    lines += turn_taking_lines(report)
    for point in report["sweep"]:
        lines.append(f"## {point['concurrency']} concurrent session"
                     f"{'s' if point['concurrency'] != 1 else ''}")
        lines.append("")
        extra = [f"{k}: {point[k]}" for k in ("turns", "errors", "timeouts") if k in point]
        if point.get("wall_s") is not None:
            extra.append(f"wall: {point['wall_s']:.0f} s")
        if extra:
            lines += [", ".join(extra), ""]
        lines += _stage_table(point["stages"], names) + [""]
        lines += turn_stats_lines(point)
        for message in point.get("error_messages", [])[:5]:
            lines.append(f"- error: {message}")
        if point.get("error_messages"):
            lines.append("")
    if image_names:
        lines += ["## Plots", ""]
        lines += [f"![{title}]({path})" for title, path in image_names.items()] + [""]
    return "\n".join(lines)
