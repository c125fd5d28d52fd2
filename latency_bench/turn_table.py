"""Markdown for the voice benchmark's turn taking: false cut-offs per pause length, slot answers,
hold-out voices, and the latency at which false cut-offs fall to 2 %.

Contract (pure functions of a report dict, schema diffvoice.latency/1):
- `turn_taking_lines(report)`: a "## Turn taking" section when any sweep point has paused or
  slot-answer turns (`turn_stats.premature_by_pause`, or "slot" in `voice_to_voice_by_kind`;
  latency_bench.turn_taking), else []. It holds: which voices are hold-out and which
  development (from `config.corpus`); one table row per configuration x concurrency (matrix
  variants, or the one configuration of a plain run) with the false cut-off rate over all
  turns and over the paused turns, the rate at each pause length as "rate (cut/n)" (a paused
  turn counts at its longest pause), voice-to-voice p50 / p90 over all measured turns and over
  slot answers, endpointing p50, answer ready at end of turn, and false cut-offs and
  voice-to-voice p50 for development and hold-out voices; then the `cutoff_lines`.
- `cutoff_lines(report)`: one line per `cutoff_2pct` entry: where false cut-offs reach 2 % and
  at what endpointing and voice-to-voice p50, or "not reached" with the lowest rate seen.
A value never measured prints "–"; a percentile with too few samples prints "n/a"
(report.PERCENTILE_MIN_SAMPLES).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from diffvoice.latency_bench.report import shown


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _ms(summary: Mapping[str, Any] | None, name: str) -> str:
    if not summary or not summary.get("count"):
        return "–"
    value = shown(summary, name)
    return "n/a" if value is None else f"{value:,.0f}"


def _p50_p90(summary: Mapping[str, Any] | None, with_n: bool = False) -> str:
    if not summary or not summary.get("count"):
        return "–"
    text = f"{_ms(summary, 'p50')} / {_ms(summary, 'p90')}"
    return f"{text} ({summary['count']})" if with_n else text


def _cut(k: int | None, n: int | None, rate: float | None) -> str:
    return "–" if not n else f"{_pct(rate)} ({k}/{n})"


def _rows(report: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(configuration label, sweep point) for every point of every configuration."""
    matrix = report.get("matrix")
    if not matrix:
        stop = report.get("config", {}).get("stop_secs")
        label = f"stop_secs={stop}" if stop is not None else "–"
        return [(label, point) for point in report["sweep"]]
    swept = list(report.get("config", {}).get("matrix") or {})
    return [(" ".join(f"{k}={variant.get(k)}" for k in swept) or "–", point)
            for variant in matrix for point in variant["sweep"]]


def _split(stats: Mapping[str, Any], name: str) -> str:
    split = (stats.get("by_split") or {}).get(name)
    if not split:
        return "–"
    v2v = split.get("voice_to_voice_ms")
    return (f"{_cut(split.get('premature'), split.get('turns'), split.get('premature_eot_rate'))}"
            f", {_ms(v2v, 'p50')}")


def _voices_lines(report: Mapping[str, Any]) -> list[str]:
    corpus = report.get("config", {}).get("corpus") or {}
    if not isinstance(corpus, Mapping) or "holdout_voices" not in corpus:
        return []
    holdout = corpus.get("holdout_voices") or []
    development = corpus.get("development_voices") or []
    rule = ("a voice named in --holdout-voices is hold-out: never used while developing the "
            "agent or its turn taking (by default the Kokoro-82M voices no training row of the "
            "embedded model uses); every other voice is development")
    if not holdout:
        return [f"No hold-out voice in this corpus ({rule}; add some with --kokoro-voices). "
                f"Development voices: {', '.join(development) or '–'}.", ""]
    return [f"Hold-out voices: {', '.join(holdout)}. Development voices: "
            f"{', '.join(development) or '–'}. Rule: {rule}.", ""]


def _pause_lengths(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> list[str]:
    lengths = {int(k) for _, p in rows for k in (p.get("turn_stats") or {})
               .get("premature_by_pause", {})}
    return [str(k) for k in sorted(lengths)]


def cutoff_lines(report: Mapping[str, Any]) -> list[str]:
    out = []
    for entry in report.get("cutoff_2pct") or []:
        group = ", ".join(f"{k}={v}" for k, v in entry.get("group", {}).items())
        where = f"at {entry['concurrency']} caller(s){f' ({group})' if group else ''}"
        head = f"false cut-offs <= 2% of {entry['basis']} {where}"
        if entry.get("reached"):
            endpoint = entry.get("endpointing_p50_ms")
            v2v = entry.get("voice_to_voice_p50_ms")
            out.append(f"{head}: reached at stop_secs={entry.get('stop_secs')}, endpointing "
                       f"p50 {'–' if endpoint is None else f'{endpoint:,.0f} ms'}, "
                       f"voice-to-voice p50 {'–' if v2v is None else f'{v2v:,.0f} ms'} "
                       f"({_pct(entry.get('premature_rate'))} of {entry.get('turns')})")
            continue
        tried = [p for p in entry.get("points", []) if p.get("premature_rate") is not None]
        least = min(tried, key=lambda p: p["premature_rate"], default=None)
        out.append(f"{head}: not reached" + (
            f" (lowest {_pct(least['premature_rate'])} of {least['turns']} at stop_secs="
            f"{least['stop_secs']})" if least else " (nothing counted)"))
    return out


def turn_taking_lines(report: Mapping[str, Any]) -> list[str]:
    rows = _rows(report)
    if not any((p.get("turn_stats") or {}).get("premature_by_pause")
               or "slot" in ((p.get("turn_stats") or {}).get("voice_to_voice_by_kind") or {})
               for _, p in rows):
        return []
    lengths = _pause_lengths(rows)
    lines = ["## Turn taking", ""] + _voices_lines(report)
    lines += [
        "| configuration | callers | turns | false cut-offs | paused turns cut | "
        + "".join(f"{ms} ms pauses cut | " for ms in lengths)
        + "voice-to-voice p50 / p90 | slot answers p50 / p90 (n) | "
          "after a question p50 / p90 (n) | endpointing p50 | "
          "answer ready | development: cut, v2v p50 | hold-out: cut, v2v p50 |",
        "|---|---:|---:|---:|---:|" + "---:|" * len(lengths) + "---:|" * 7,
    ]
    for label, point in rows:
        stats = point.get("turn_stats") or {}
        by_pause = stats.get("premature_by_pause") or {}
        pauses = "".join(f"{_cut(c.get('premature'), c.get('turns'), c.get('rate'))} | "
                         if (c := by_pause.get(ms)) else "– | " for ms in lengths)
        every = _cut(stats.get("premature_eot"), point.get("turns"),
                     stats.get("premature_eot_rate"))
        paused = _cut(stats.get("paused_premature"), stats.get("paused_turns"),
                      stats.get("paused_premature_rate"))
        kinds = stats.get("voice_to_voice_by_kind") or {}
        slot, asked = kinds.get("slot"), kinds.get("slot_after_question")
        lines.append(
            f"| {label} | {point['concurrency']} | {point.get('turns', '–')} | {every} | "
            f"{paused} | {pauses}{_p50_p90(point['stages'].get('voice_to_voice_ms'))} | "
            f"{_p50_p90(slot, True)} | {_p50_p90(asked, True)} | "
            f"{_ms(point['stages'].get('endpointing_ms'), 'p50')} | "
            f"{_pct(stats.get('answer_ready_rate'))} | {_split(stats, 'development')} | "
            f"{_split(stats, 'holdout')} |")
    lines += ["", "*A false cut-off: the server ended the user turn before the prompt's last "
                  "speech. A paused turn counts at its longest pause; rates are "
                  "\"rate (cut/n)\" over every attempted turn.*", ""]
    cutoffs = cutoff_lines(report)
    if cutoffs:
        lines += ["Latency at which false cut-offs fall to 2% (per stop_secs sweep: the point "
                  "with the lowest endpointing p50 among those at or under 2%):", ""]
        lines += [f"- {line}" for line in cutoffs] + [""]
    return lines
