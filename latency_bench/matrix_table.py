"""Markdown for the voice benchmark's per-turn statistics and its configuration matrix.

Contract (pure functions of a report dict, schema diffvoice.latency/1):
- `turn_stats_lines(point)`: a small table of one sweep point's `turn_stats` (draft hit rate,
  answer ready at end of turn, drafts and extra engine passes per turn, premature end-of-turn
  rate, WER per voice), or [] when the point has none;
- `matrix_lines(report)`: for a report with a `matrix` block (latency_bench.matrix), one row per
  variant (ASR, smart turn, drafting, stop_secs) x concurrency: voice-to-voice p50/p90/p99 at
  the client, llm_ttft, ASR final (VAD stop
  -> final transcript), endpointing p50, and the turn statistics; [] otherwise;
- `goal_lines(report)`: the issue's goals (1 caller: voice-to-voice p50 <= 450 ms, p90 <= 600,
  premature end of turn <= 2 %, answer ready at end of turn >= 80 %; 4 callers: p50 <= 550)
  checked against the report's headline sweep, one "met"/"NOT met" line each with the figure.
A value never measured prints "–".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(summary: Mapping[str, Any] | None, key: str) -> str:
    if not summary or not summary.get("count") or summary.get(key) is None:
        return "–"
    return f"{summary[key]:,.0f}"


def _wer(by_voice: Mapping[str, Any] | None) -> str:
    if not by_voice:
        return "–"
    return ", ".join(f"{voice} {_pct(value)}" for voice, value in by_voice.items())


def turn_stats_lines(point: Mapping[str, Any]) -> list[str]:
    stats = point.get("turn_stats")
    if not stats:
        return []
    return [
        "| draft hit | answer ready at end of turn | drafts / turn | extra passes / turn | "
        "premature end of turn | WER per voice |",
        "|---:|---:|---:|---:|---:|---|",
        f"| {_pct(stats.get('draft_hit_rate'))} | {_pct(stats.get('answer_ready_rate'))} | "
        f"{_num(stats.get('drafts_per_turn'))} | {_num(stats.get('extra_passes_per_turn'))} | "
        f"{_pct(stats.get('premature_eot_rate'))} ({stats.get('premature_eot', 0)}) | "
        f"{_wer(stats.get('wer_by_voice'))} |",
        "",
    ]


def matrix_lines(report: Mapping[str, Any]) -> list[str]:
    matrix = report.get("matrix")
    if not matrix:
        return []
    lines = [
        "## Configurations (same corpus, same run)", "",
        "| ASR | smart turn | drafting | stop_secs | callers | turns | errors | "
        "voice-to-voice p50 / p90 / p99 | llm_ttft p50 | ASR final p50 | endpointing p50 | "
        "draft hit | answer ready | extra passes / turn | premature EOT | WER per voice |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for variant in matrix:
        for point in variant["sweep"]:
            stages = point["stages"]
            v2v = stages.get("voice_to_voice_ms")
            stats = point.get("turn_stats", {})
            lines.append(
                f"| {variant['asr']} | {variant.get('smart_turn', '–')} | "
                f"{variant['drafting']} | {variant.get('stop_secs', '–')} | "
                f"{point['concurrency']} | "
                f"{point.get('turns', '–')} | {point.get('errors', 0) + point.get('timeouts', 0)}"
                f" | {_ms(v2v, 'p50')} / {_ms(v2v, 'p90')} / {_ms(v2v, 'p99')} | "
                f"{_ms(stages.get('llm_ttft_ms'), 'p50')} | {_ms(stages.get('asr_ms'), 'p50')} | "
                f"{_ms(stages.get('endpointing_ms'), 'p50')} | "
                f"{_pct(stats.get('draft_hit_rate'))} | {_pct(stats.get('answer_ready_rate'))} | "
                f"{_num(stats.get('extra_passes_per_turn'))} | "
                f"{_pct(stats.get('premature_eot_rate'))} | {_wer(stats.get('wer_by_voice'))} |")
    return lines + [""]


def goal_lines(report: Mapping[str, Any]) -> list[str]:
    by_level = {p["concurrency"]: p for p in report.get("sweep", [])}
    head = report.get("config", {}).get("headline")
    where = f" ({', '.join(f'{k}={v}' for k, v in head.items())})" if head else ""
    out = []

    def check(level: int, label: str, value: float | None, limit: float, below: bool,
              unit: str) -> None:
        if value is None:
            out.append(f"goal {label} at {level} caller(s){where}: not measured")
            return
        met = value <= limit if below else value >= limit
        shown = f"{value:.0f} ms" if unit == "ms" else f"{100 * value:.1f}%"
        bound = f"{limit:.0f} ms" if unit == "ms" else f"{100 * limit:.0f}%"
        out.append(f"goal {label} {'<=' if below else '>='} {bound} at {level} caller(s)"
                   f"{where}: {shown}, {'met' if met else 'NOT met'}")

    one, four = by_level.get(1), by_level.get(4)
    if one is not None:
        v2v = one["stages"].get("voice_to_voice_ms") or {}
        stats = one.get("turn_stats", {})
        check(1, "voice-to-voice p50", v2v.get("p50"), 450, True, "ms")
        check(1, "voice-to-voice p90", v2v.get("p90"), 600, True, "ms")
        check(1, "premature end of turn", stats.get("premature_eot_rate"), 0.02, True, "rate")
        check(1, "answer ready at end of turn", stats.get("answer_ready_rate"), 0.80, False,
              "rate")
    if four is not None:
        v2v = four["stages"].get("voice_to_voice_ms") or {}
        check(4, "voice-to-voice p50", v2v.get("p50"), 550, True, "ms")
    return out
