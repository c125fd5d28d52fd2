"""What dominates the tail: findings computed from per-turn stage values, as plain sentences.

Contract: `tail_findings(per_level)` takes `{concurrency: [stages_of_one_turn, ...]}` (each a
dict of `<stage>_ms` values, as `TurnResult.stages()` returns) and returns a few sentences:

- per level: voice_to_voice p50 and p99 (max instead, labelled so, below 100 turns: see
  report.PERCENTILE_MIN_SAMPLES), and for the slowest `tail_fraction` of turns (those at or
  above the voice_to_voice p90 by default) the mean time spent in each component: endpointing,
  asr, llm_ttft, tts_first_audio, and `other` = voice_to_voice minus those four (the server
  handing audio to the socket, transport, and the client's playout queue). Only turns where all
  components were measured are decomposed. The components can overlap in time (recognition runs
  while the turn end is still being decided; a draft answers before the transcript is final):
  where they add up to more than voice_to_voice, the sentence says by how much and gives no
  `other` (a negative duration is no share of anything);
- across levels: how voice_to_voice p99 (or max, by the same rule) grows from the lowest to the
  highest concurrency, and which component's grows the most.

Every number in a sentence is computed here from the samples; nothing is hard-coded. An empty
input gives no findings. Knows nothing about sockets or files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from diffvoice.latency_bench.report import PERCENTILE_MIN_SAMPLES
from diffvoice.latency_bench.stats import percentile, summarize

COMPONENTS: tuple[str, ...] = ("endpointing_ms", "asr_ms", "llm_ttft_ms", "tts_first_audio_ms")
TOTAL = "voice_to_voice_ms"


def _short(stage: str) -> str:
    return stage.removesuffix("_ms")


def _sessions(level: int) -> str:
    return f"{level} session{'s' if level != 1 else ''}"


def decompose(turns: Sequence[Mapping[str, float]]) -> dict[str, float] | None:
    """Mean ms per component (+ 'other') over turns where all were measured; None if none."""
    full = [t for t in turns if TOTAL in t and all(c in t for c in COMPONENTS)]
    if not full:
        return None
    means = {c: sum(t[c] for t in full) / len(full) for c in COMPONENTS}
    means["other"] = sum(t[TOTAL] - sum(t[c] for c in COMPONENTS) for t in full) / len(full)
    means[TOTAL] = sum(t[TOTAL] for t in full) / len(full)
    return means


def _level_sentence(level: int, turns: Sequence[Mapping[str, float]],
                    tail_fraction: float) -> str | None:
    totals = [t[TOTAL] for t in turns if TOTAL in t]
    if not totals:
        return None
    summary = summarize(totals)
    cutoff = percentile(totals, 100.0 * (1.0 - tail_fraction))
    tail = [t for t in turns if TOTAL in t and t[TOTAL] >= cutoff]
    body = [t for t in turns if TOTAL in t and t[TOTAL] <= summary["p50"]]
    label, value = tail_stat(totals)
    sentence = (f"{_sessions(level)}: voice_to_voice p50 {summary['p50']:,.0f} ms, {label} "
                f"{value:,.0f} ms ({len(totals)} turns).")
    tail_parts, body_parts = decompose(tail), decompose(body)
    if tail_parts is None:
        return sentence
    whole = tail_parts[TOTAL]
    overlap = -tail_parts["other"] if tail_parts["other"] < 0 else 0.0
    parts = sorted(((k, v) for k, v in tail_parts.items()
                    if k != TOTAL and not (k == "other" and overlap)), key=lambda kv: -kv[1])
    listing = ", ".join(f"{_short(k)} {v:,.0f} ms ({100 * v / whole:.0f}%)" for k, v in parts)
    biggest = parts[0][0]
    sentence += (f" The slowest {len(tail)} turn{'s' if len(tail) != 1 else ''} "
                 f"(>= {cutoff:,.0f} ms, mean {whole:,.0f} ms) spend on average: {listing}.")
    if overlap:
        sentence += (f" These stages overlap in time: together they exceed voice_to_voice by "
                     f"{overlap:,.0f} ms, so shares add up to more than 100%.")
    if body_parts is not None:
        growth = sorted(((k, tail_parts[k] - body_parts[k]) for k, _ in parts),
                        key=lambda kv: -kv[1])
        top, extra = growth[0]
        sentence += (f" Largest share in the tail: {_short(biggest)}; largest difference from "
                     f"the median-or-faster turns: {_short(top)} (+{extra:,.0f} ms).")
    return sentence


def tail_findings(per_level: Mapping[int, Sequence[Mapping[str, float]]],
                  tail_fraction: float = 0.1) -> list[str]:
    if not 0.0 < tail_fraction < 1.0:
        raise ValueError(f"tail_fraction must be in (0, 1), got {tail_fraction}")
    findings = []
    levels = sorted(level for level, turns in per_level.items() if turns)
    for level in levels:
        sentence = _level_sentence(level, per_level[level], tail_fraction)
        if sentence:
            findings.append(sentence)
    measured = [lv for lv in levels if any(TOTAL in t for t in per_level[lv])]
    if len(measured) >= 2:
        low, high = measured[0], measured[-1]

        # one tail statistic for the whole comparison: p99 only if every level has the samples
        enough = all(sum(TOTAL in t for t in per_level[lv]) >= PERCENTILE_MIN_SAMPLES["p99"]
                     for lv in (low, high))
        label = "p99" if enough else "max"

        def p99(level: int, stage: str) -> float | None:
            values = [t[stage] for t in per_level[level] if stage in t]
            if not values:
                return None
            return percentile(values, 99.0) if enough else max(values)

        total_low, total_high = p99(low, TOTAL), p99(high, TOTAL)
        growth = []
        for stage in COMPONENTS:
            a, b = p99(low, stage), p99(high, stage)
            if a is not None and b is not None:
                growth.append((b - a, stage))
        sentence = (f"From {_sessions(low)} to {high}, voice_to_voice {label} goes from "
                    f"{total_low:,.0f} to {total_high:,.0f} ms "
                    f"({total_high - total_low:+,.0f} ms).")
        if growth:
            growth.sort(reverse=True)
            ranked = ", ".join(f"{_short(s)} {g:+,.0f} ms" for g, s in growth)
            sentence += f" Change in {label} by stage: {ranked}."
        findings.append(sentence)
    return findings


def tail_stat(values: Sequence[float]) -> tuple[str, float]:
    """("p99", value) with enough samples for a p99 (report.PERCENTILE_MIN_SAMPLES), else
    ("max", value): a p99 of a few dozen turns is only an interpolation near the max."""
    if len(values) >= PERCENTILE_MIN_SAMPLES["p99"]:
        return "p99", percentile(values, 99.0)
    return "max", max(values)
