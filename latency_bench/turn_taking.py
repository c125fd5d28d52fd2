"""Turn-taking figures of the voice benchmark: false cut-offs per pause length, slot answers,
hold-out voices, and the latency at which false cut-offs fall to 2 %.

Contract (pure functions; no sockets, no rendering):
- A turn is *cut off* (`premature_eot`) when the server ended the user turn before the
  prompt's last speech (latency_bench.browser_client / twilio_client decide it).
- `premature_by_pause(turns)`: over the turns whose prompt has pauses inside it
  (`pauses_ms`), grouped by the prompt's LONGEST pause (the generated corpus gives every pause
  of a prompt the same length, so this is the prompt's pause length):
  {"300": {"turns": n, "premature": k, "rate": k / n}, ...}, keys in ascending milliseconds.
  Every attempted turn counts (failed and timed-out ones too: a cut-off turn is a failed one).
- `paused_premature(turns) -> (cut off, paused turns)`: the same, all lengths together.
- `voice_to_voice_by_kind(turns)`: {kind: stage SUMMARY} of voice_to_voice_ms over the measured
  turns of each prompt kind present ("question", "paused", "slot": one-word slot answers), and
  "slot_after_question": the slot answers whose session's previous turn was answered with a
  question (its bot text ends with "?"; only where the client hears the bot's text, not over
  Twilio). A slot answer is written as the answer to the agent's question; where the agent
  answered otherwise, a lone "friday" is ambiguous and the server rightly waits.
- `by_split(turns, holdout_voices)`: {"development" | "holdout": {"voices", "turns",
  "premature", "premature_eot_rate", "voice_to_voice_ms"}}: voices in `holdout_voices` are
  hold-out (never used while developing the agent or its turn taking), all others development.
  Only the splits that occur.
- `cutoff_points(variants)`: the issue's "latency at which false cut-offs fall to 2 %". Variants
  (matrix entries: labels "asr", "smart_turn", "drafting", "stop_secs" and a "sweep") that share
  every label but `stop_secs` form one stop_secs sweep; per sweep and concurrency level, the
  point whose false cut-off rate is <= CUTOFF_GOAL and whose endpointing p50 is lowest
  (voice-to-voice p50 where endpointing was not measured, e.g. over Twilio) is the answer, or
  "not reached". The rate is over the paused turns when the sweep has any (the turns that can
  be cut at a pause), else over all turns; `basis` says which.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from diffvoice.latency_bench.stats import summarize
from diffvoice.latency_bench.turns import TurnResult

CUTOFF_GOAL = 0.02
LABELS = ("asr", "smart_turn", "drafting", "stop_secs")   # what names a matrix variant


def _rate(k: int, n: int) -> float | None:
    return round(k / n, 4) if n else None


def premature_by_pause(turns: Iterable[TurnResult]) -> dict[str, dict[str, Any]]:
    counts: dict[int, list[int]] = {}
    for turn in turns:
        if turn.pauses_ms:
            entry = counts.setdefault(max(turn.pauses_ms), [0, 0])
            entry[0] += 1
            entry[1] += bool(turn.premature_eot)
    return {str(length): {"turns": n, "premature": k, "rate": _rate(k, n)}
            for length, (n, k) in sorted(counts.items())}


def paused_premature(turns: Iterable[TurnResult]) -> tuple[int, int]:
    paused = [t for t in turns if t.pauses_ms]
    return sum(bool(t.premature_eot) for t in paused), len(paused)


def _v2v(turns: Iterable[TurnResult]) -> dict[str, Any]:
    return summarize(v for t in turns
                     if (v := t.stages(True).get("voice_to_voice_ms")) is not None)


def voice_to_voice_by_kind(turns: Sequence[TurnResult]) -> dict[str, dict[str, Any]]:
    kinds = sorted({t.kind for t in turns})
    out = {kind: _v2v(t for t in turns if t.kind == kind) for kind in kinds}
    asked = _after_question(turns)
    if asked:
        out["slot_after_question"] = _v2v(asked)
    return out


def _after_question(turns: Sequence[TurnResult]) -> list[TurnResult]:
    """The slot turns whose session's previous turn the bot answered with a question."""
    said = {(t.concurrency, t.session, t.turn): t.bot_text for t in turns}
    return [t for t in turns if t.kind == "slot"
            and (said.get((t.concurrency, t.session, t.turn - 1)) or "").rstrip().endswith("?")]


def by_split(turns: Sequence[TurnResult], holdout_voices: Sequence[str]
             ) -> dict[str, dict[str, Any]]:
    out = {}
    for split in ("development", "holdout"):
        members = [t for t in turns if ((t.voice or "?") in holdout_voices) == (split == "holdout")]
        if not members:
            continue
        cut = sum(bool(t.premature_eot) for t in members)
        out[split] = {"voices": sorted({t.voice or "?" for t in members}),
                      "turns": len(members), "premature": cut,
                      "premature_eot_rate": _rate(cut, len(members)),
                      "voice_to_voice_ms": _v2v(members)}
    return out


def _p50(point: Mapping[str, Any], stage: str) -> float | None:
    summary = point.get("stages", {}).get(stage) or {}
    return summary.get("p50") if summary.get("count") else None


def _criterion(point: Mapping[str, Any], paused: bool) -> tuple[float | None, int]:
    stats = point.get("turn_stats") or {}
    if paused:
        return stats.get("paused_premature_rate"), int(stats.get("paused_turns") or 0)
    return stats.get("premature_eot_rate"), int(point.get("turns") or 0)


def cutoff_points(variants: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (stop_secs sweep, concurrency): see the module docstring."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for variant in variants:
        key = tuple((k, variant.get(k)) for k in LABELS if k != "stop_secs")
        groups.setdefault(key, []).append(variant)
    out = []
    for key, members in groups.items():
        paused = any((p.get("turn_stats") or {}).get("paused_turns")
                     for v in members for p in v["sweep"])
        levels = sorted({p["concurrency"] for v in members for p in v["sweep"]})
        for level in levels:
            points = []
            for variant in members:
                for point in variant["sweep"]:
                    if point["concurrency"] != level:
                        continue
                    rate, n = _criterion(point, paused)
                    points.append({"stop_secs": variant.get("stop_secs"),
                                   "premature_rate": rate, "turns": n,
                                   "endpointing_p50_ms": _p50(point, "endpointing_ms"),
                                   "voice_to_voice_p50_ms": _p50(point, "voice_to_voice_ms")})
            points.sort(key=lambda p: (p["stop_secs"] is None, p["stop_secs"] or 0.0))
            out.append({"group": {k: v for k, v in key if v is not None}, "concurrency": level,
                        "basis": "paused turns" if paused else "all turns", "points": points,
                        **_best(points)})
    return out


def _latency(point: Mapping[str, Any]) -> float:
    value = point["endpointing_p50_ms"]
    if value is None:
        value = point["voice_to_voice_p50_ms"]
    return math.inf if value is None else value


def _best(points: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    good = [p for p in points if p["premature_rate"] is not None and p["turns"]
            and p["premature_rate"] <= CUTOFF_GOAL]
    if not good:
        return {"reached": False}
    best = min(good, key=lambda p: (_latency(p), p["voice_to_voice_p50_ms"] or math.inf))
    return {"reached": True, **{k: best[k] for k in ("stop_secs", "premature_rate", "turns",
                                                     "endpointing_p50_ms",
                                                     "voice_to_voice_p50_ms")}}
