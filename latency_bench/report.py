"""The latency report format shared by `diffvoice bench voice` and `diffvoice bench engine`.

Contract (schema "diffvoice.latency/1", documented for users in docs/latency/SCHEMA.md):

    {
      "schema":  "diffvoice.latency/1",
      "kind":    "voice" | "engine" | ...,        # which benchmark wrote it
      "created": "2026-01-01T12:00:00Z",          # UTC, ISO 8601
      "config":  {...},                           # what was measured and where (free-form dict;
                                                  #  voice: machine, versions, model, asr, tts,
                                                  #  stop_secs, protocol, ...)
      "stages":  {STAGE: SUMMARY, ...},           # headline: the lowest-concurrency sweep point
      "sweep":   [{"concurrency": 1, "stages": {STAGE: SUMMARY}, "turns": 40, "errors": 0,
                   "timeouts": 0, "wall_s": 61.2}, ...],   # ascending concurrency
      "samples": {"1": {STAGE: [ms, ...]}, ...},  # optional raw values (CDF plots, re-analysis)
      "analysis": ["...", ...],                   # optional machine-written findings
      "notes":   "..."                            # optional human paragraph under the table
    }

    SUMMARY = {"count": int, "mean": ms|null, "p50": ms|null, "p90": ms|null, "p95": ms|null,
               "p99": ms|null, "max": ms|null}       (null exactly when count == 0)

Stage names end in `_ms` and their values are milliseconds. `turns` counts attempted turns
(measured + failed), `errors` and `timeouts` count the failed ones: nothing is dropped silently.

Producers build reports with `SweepPoint` + `build_report`; consumers call `load_report`, which
validates. This module knows nothing about sockets, audio, plots or the engine.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from diffvoice.latency_bench.stats import SUMMARY_FIELDS, summarize

SCHEMA_ID = "diffvoice.latency/1"

# The voice benchmark's stages, in pipeline order (the order tables and plots use).
VOICE_STAGES: tuple[str, ...] = (
    "voice_to_voice_ms",   # end of user speech -> first bot audio at the client (endpointing in)
    "endpointing_ms",      # end of user speech -> end of the user turn
    "asr_ms",              # VAD stop -> final transcript
    "llm_ttft_ms",         # final transcript -> first LLM text
    "tts_first_audio_ms",  # first LLM text -> first TTS audio produced
    "server_ms",           # VAD stop -> first audio frame sent by the server
)  # a Realtime run adds speech_stopped_to_audio_ms (STAGE_DESCRIPTIONS) after these

STAGE_DESCRIPTIONS: dict[str, str] = {
    "voice_to_voice_ms": "end of user speech -> first audible bot audio played at the client",
    "endpointing_ms": "end of user speech -> the server ended the user turn (VAD pause + "
                      "the turn-end decision)",
    "asr_ms": "VAD stop -> final transcript",
    "llm_ttft_ms": "final transcript -> first LLM text",
    "tts_first_audio_ms": "first LLM text -> first TTS audio",
    "server_ms": "VAD stop -> first audio frame sent",
    "speech_stopped_to_audio_ms": "(Realtime) input_audio_buffer.speech_stopped -> the first "
                                  "response.output_audio.delta, as the client received them",
}


@dataclass
class SweepPoint:
    """Raw results at one concurrency level; `samples` maps stage -> milliseconds."""

    concurrency: int
    samples: dict[str, list[float]] = field(default_factory=dict)
    turns: int = 0
    errors: int = 0
    timeouts: int = 0
    wall_s: float | None = None
    error_messages: list[str] = field(default_factory=list)
    turn_stats: dict[str, Any] = field(default_factory=dict)  # rates/counts (bench voice)

    def __post_init__(self) -> None:
        if not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency must be an int >= 1, got {self.concurrency!r}")
        for name in ("turns", "errors", "timeouts"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")
        if self.errors + self.timeouts > self.turns:
            raise ValueError(f"errors + timeouts ({self.errors}+{self.timeouts}) exceed "
                             f"turns ({self.turns})")


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def build_report(*, kind: str, config: Mapping[str, Any], points: Sequence[SweepPoint],
                 stages: Sequence[str] | None = None, keep_samples: bool = True,
                 analysis: Sequence[str] = (), notes: str | None = None) -> dict[str, Any]:
    """Summarise `points` into a schema-valid report dict.

    `stages` fixes the stage order (default: every stage seen, voice stages first). The headline
    `stages` block is the lowest-concurrency point. Raw samples are kept unless told not to.
    """
    if not points:
        raise ValueError("a report needs at least one sweep point")
    ordered = sorted(points, key=lambda p: p.concurrency)
    if len({p.concurrency for p in ordered}) != len(ordered):
        raise ValueError("sweep points must have distinct concurrency levels")
    if stages is None:
        seen = {name for p in ordered for name in p.samples}
        stages = [s for s in VOICE_STAGES if s in seen] + sorted(seen - set(VOICE_STAGES))
    for name in stages:
        if not name.endswith("_ms"):
            raise ValueError(f"stage names end in _ms (milliseconds), got {name!r}")
    sweep = []
    for point in ordered:
        sweep.append({
            "concurrency": point.concurrency,
            "stages": {name: summarize(point.samples.get(name, ())) for name in stages},
            "turns": point.turns,
            "errors": point.errors,
            "timeouts": point.timeouts,
            "wall_s": point.wall_s,
            **({"error_messages": list(point.error_messages[:20])} if point.error_messages
               else {}),
            **({"turn_stats": dict(point.turn_stats)} if point.turn_stats else {}),
        })
    report: dict[str, Any] = {
        "schema": SCHEMA_ID,
        "kind": kind,
        "created": _utc_now(),
        "config": dict(config),
        "stages": sweep[0]["stages"],
        "sweep": sweep,
    }
    if keep_samples:
        report["samples"] = {
            str(p.concurrency): {name: [round(float(v), 3) for v in p.samples.get(name, ())]
                                 for name in stages}
            for p in ordered
        }
    if analysis:
        report["analysis"] = list(analysis)
    if notes:
        report["notes"] = notes
    validate_report(report)
    return report


def _check_summary(summary: Any, where: str) -> None:
    if not isinstance(summary, Mapping) or set(summary) != set(SUMMARY_FIELDS):
        raise ValueError(f"{where}: a stage summary has exactly the fields {SUMMARY_FIELDS}")
    count = summary["count"]
    if not isinstance(count, int) or count < 0:
        raise ValueError(f"{where}.count must be an int >= 0, got {count!r}")
    for name in SUMMARY_FIELDS[1:]:
        value = summary[name]
        if count == 0 and value is not None:
            raise ValueError(f"{where}.{name} must be null when count is 0")
        if count > 0 and not isinstance(value, int | float):
            raise ValueError(f"{where}.{name} must be a number when count > 0, got {value!r}")
    if count > 0:
        chain = [summary[k] for k in ("p50", "p90", "p95", "p99", "max")]
        if any(a > b + 1e-9 for a, b in zip(chain, chain[1:], strict=False)):
            raise ValueError(f"{where}: percentiles must not decrease: {chain}")


def validate_report(report: Any) -> None:
    """Raise ValueError naming the first field that breaks schema diffvoice.latency/1."""
    if not isinstance(report, Mapping):
        raise ValueError("a report is a JSON object")
    for key in ("config", "stages", "sweep"):
        if key not in report:
            raise ValueError(f"report is missing the top-level field {key!r}")
    if report.get("schema", SCHEMA_ID) != SCHEMA_ID:
        raise ValueError(f"unsupported schema {report.get('schema')!r}, expected {SCHEMA_ID!r}")
    if not isinstance(report["config"], Mapping):
        raise ValueError("config must be an object")
    if not isinstance(report["stages"], Mapping):
        raise ValueError("stages must be an object mapping stage name -> summary")
    for name, summary in report["stages"].items():
        _check_summary(summary, f"stages.{name}")
    sweep = report["sweep"]
    if not isinstance(sweep, list):
        raise ValueError("sweep must be a list")
    previous = 0
    for i, point in enumerate(sweep):
        if not isinstance(point, Mapping) or "concurrency" not in point or "stages" not in point:
            raise ValueError(f"sweep[{i}] needs 'concurrency' and 'stages'")
        concurrency = point["concurrency"]
        if not isinstance(concurrency, int) or concurrency <= previous:
            raise ValueError(f"sweep[{i}].concurrency must be an int, ascending, got "
                             f"{concurrency!r}")
        previous = concurrency
        for name, summary in point["stages"].items():
            _check_summary(summary, f"sweep[{i}].stages.{name}")
        for key in ("turns", "errors", "timeouts"):
            if key in point and (not isinstance(point[key], int) or point[key] < 0):
                raise ValueError(f"sweep[{i}].{key} must be an int >= 0")


def stage_names(report: Mapping[str, Any]) -> list[str]:
    """Stages in report order: the headline block's order, then any only found in the sweep."""
    names = list(report["stages"])
    for point in report["sweep"]:
        names += [n for n in point["stages"] if n not in names]
    return names


def save_report(report: Mapping[str, Any], path: str | Path) -> Path:
    validate_report(report)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def load_report(path: str | Path) -> dict[str, Any]:
    try:
        report = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from exc
    validate_report(report)
    return report


# --- sample-size rule for printed percentiles ---------------------------------------------------
# A q-th percentile is printed only when the sample is large enough that, in expectation, at
# least one sample lies above it: n >= 1 / (1 - q). Below that, the type-7 estimate is an
# interpolation between the largest samples and says no more than `max` (which is printed), so
# tables show "n/a" and plots leave the point out. The JSON keeps every computed value; readers
# apply `shown()`.
PERCENTILE_MIN_SAMPLES: dict[str, int] = {"p50": 1, "p90": 10, "p95": 20, "p99": 100}
SAMPLE_SIZE_RULE = ("percentiles need enough samples: p90 is shown from n >= 10, p95 from "
                    "n >= 20, p99 from n >= 100 (at least one sample expected above it); "
                    "below that the cell reads n/a and max is the tail to look at")


def shown(summary: Mapping[str, Any] | None, name: str) -> float | None:
    """`summary[name]` when the sample-size rule allows printing it, else None."""
    if not summary or not summary.get("count"):
        return None
    if summary["count"] < PERCENTILE_MIN_SAMPLES.get(name, 1):
        return None
    return summary.get(name)


def sweep_tail(report: Mapping[str, Any]) -> str:
    """The tail percentile the sweep table shows: the highest of p99, p95, p90 that every
    point's samples support (by PERCENTILE_MIN_SAMPLES), else "max"."""
    counts = [max((s.get("count") or 0 for s in point.get("stages", {}).values() if s),
                  default=0) for point in report.get("sweep", [])]
    smallest = min((c for c in counts if c), default=0)
    return next((name for name in ("p99", "p95", "p90")
                 if smallest >= PERCENTILE_MIN_SAMPLES[name]), "max")


def enough_samples(summary: Mapping[str, Any] | None, name: str) -> bool:
    return bool(summary and summary.get("count")
                and summary["count"] >= PERCENTILE_MIN_SAMPLES.get(name, 1))
