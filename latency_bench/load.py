"""The load generator: N concurrent simulated callers per level, a sweep over levels, a report.

Contract:
- `await run_level(config, url, prompts, level, rng, progress)` runs `level` sessions at once
  (browser or Twilio protocol per `config.protocol`), each starting at a random offset in
  [0, stagger_s) and speaking at least `config.turns_per_session(level)` prompts drawn from
  `prompts` (`plan_sessions`: the corpus's units, i.e. lone prompts and whole dialogues in step
  order, shuffled per session by `rng`, so a seed reproduces the plan; a session ends with a
  whole unit, so it may speak a turn or two more). It returns a `LevelResult`:
  every attempted turn (ok, error or timeout — none dropped), the wall time and what the
  server announced in `session.started`.
- `await run_sweep(config, url, prompts, progress)` runs the levels in ascending order and
  returns `(points, levels)`; `make_report(config, levels, ...)` turns them into a report
  (schema diffvoice.latency/1) with per-turn records under `turns`, machine and versions in
  `config`, the tail findings of latency_bench.analysis, and `cutoff_2pct`
  (latency_bench.turn_taking.cutoff_points over this one configuration).
Knows nothing about the CLI, about starting servers or about output files.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from diffvoice.latency_bench.analysis import tail_findings
from diffvoice.latency_bench.browser_client import run_browser_session
from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import Prompt, session_units
from diffvoice.latency_bench.realtime_client import run_realtime_session
from diffvoice.latency_bench.report import VOICE_STAGES, SweepPoint, build_report
from diffvoice.latency_bench.turn_taking import (
    by_split,
    cutoff_points,
    paused_premature,
    premature_by_pause,
    voice_to_voice_by_kind,
)
from diffvoice.latency_bench.turns import TurnResult
from diffvoice.latency_bench.twilio_client import run_twilio_session
from diffvoice.latency_bench.wer import wer
from diffvoice.voice.machine import git_revision, machine_info, package_versions


def turn_stats(turns: Sequence[TurnResult], holdout_voices: Sequence[str] = ()
               ) -> dict[str, Any]:
    """Per-level rates over the attempted turns (None where nothing could be counted):
    draft_hit_rate, drafts_per_turn, extra_passes_per_turn and answer_ready_rate over the turns
    whose server record has them; premature_eot_rate over every attempted turn; wer_by_voice
    over the turns whose prompt was spoken (all final transcripts of the turn vs the prompt
    text, fillers dropped; latency_bench.wer); the turn-taking figures of
    latency_bench.turn_taking: paused_turns / paused_premature / paused_premature_rate,
    premature_by_pause, voice_to_voice_by_kind and by_split (hold-out voices apart)."""
    records = [t.server for t in turns if t.server]

    def rate(key: str) -> float | None:
        values = [r[key] for r in records if isinstance(r.get(key), bool)]
        return round(sum(values) / len(values), 4) if values else None

    def mean(key: str) -> float | None:
        values = [r[key] for r in records if isinstance(r.get(key), int | float)
                  and not isinstance(r.get(key), bool)]
        return round(sum(values) / len(values), 3) if values else None

    voices = sorted({t.voice or "?" for t in turns if t.prompt})
    by_voice = {}
    for voice in voices:
        pairs = [(t.prompt, t.transcript) for t in turns
                 if (t.voice or "?") == voice and t.speech_end_t is not None]  # spoken turns
        value = wer(pairs)
        by_voice[voice] = None if value is None else round(value, 4)
    paused_cut, paused_n = paused_premature(turns)
    return {
        "draft_hit_rate": rate("draft_hit"),
        "drafts_per_turn": mean("drafts"),
        "extra_passes_per_turn": mean("extra_passes"),
        "answer_passes_per_turn": mean("answer_passes"),
        "answer_ready_rate": rate("answer_ready"),
        "premature_eot_rate": round(sum(t.premature_eot for t in turns) / len(turns), 4)
        if turns else None,
        "premature_eot": sum(t.premature_eot for t in turns),
        "wer_by_voice": by_voice,
        "paused_turns": paused_n,
        "paused_premature": paused_cut,
        "paused_premature_rate": round(paused_cut / paused_n, 4) if paused_n else None,
        "premature_by_pause": premature_by_pause(turns),
        "voice_to_voice_by_kind": voice_to_voice_by_kind(turns),
        "by_split": by_split(turns, holdout_voices),
    }


@dataclass
class LevelResult:
    level: int
    turns: list[TurnResult] = field(default_factory=list)
    wall_s: float = 0.0
    sessions: list[dict[str, Any]] = field(default_factory=list)   # session.started / call info

    def point(self, shared_clock: bool, holdout_voices: Sequence[str] = ()) -> SweepPoint:
        samples: dict[str, list[float]] = {name: [] for name in VOICE_STAGES}
        for turn in self.turns:
            for name, value in turn.stages(shared_clock).items():
                samples.setdefault(name, []).append(value)
        statuses = Counter(t.status for t in self.turns)
        messages = Counter(t.message for t in self.turns if t.status != "ok" and t.message)
        return SweepPoint(
            concurrency=self.level, samples=samples, turns=len(self.turns),
            errors=statuses["error"], timeouts=statuses["timeout"], wall_s=round(self.wall_s, 2),
            error_messages=[f"{n}x {m}" for m, n in messages.most_common()],
            turn_stats=turn_stats(self.turns, holdout_voices))


def plan_sessions(prompts: Sequence[Prompt], level: int, turns: int,
                  rng: random.Random) -> list[list[Prompt]]:
    """Prompts per session: each session walks its own shuffled copy of the corpus's units
    (latency_bench.corpus.session_units), whole units, until it has at least `turns`."""
    if not prompts:
        raise ValueError("no prompts to speak")
    units = session_units(prompts)
    plans = []
    for _ in range(level):
        order = list(units)
        rng.shuffle(order)
        plan: list[Prompt] = []
        while len(plan) < turns:   # past the corpus's end: walk the same order again
            for unit in order:
                plan += unit
                if len(plan) >= turns:
                    break
        plans.append(plan)
    return plans


async def run_level(config: BenchConfig, url: str, prompts: Sequence[Prompt], level: int,
                    rng: random.Random, progress: Any = None) -> LevelResult:
    result = LevelResult(level=level)
    plans = plan_sessions(prompts, level, config.turns_per_session(level), rng)
    extra = sum(map(len, plans)) - level * config.turns_per_session(level)
    if progress is not None and extra:   # whole dialogues: a session may speak a bit more
        progress.total += extra
        progress.refresh()
    delays = [0.0] + [rng.uniform(0.0, config.stagger_s) for _ in range(level - 1)]
    run_session = {"browser": run_browser_session, "twilio": run_twilio_session,
                   "realtime": run_realtime_session}[config.protocol]
    failures = 0

    def on_turn(turn: TurnResult) -> None:
        nonlocal failures
        result.turns.append(turn)
        failures += turn.status != "ok"
        if progress is not None:
            progress.set_postfix(sessions=level, failed=failures, refresh=False)
            progress.update(1)

    async def one(session: int) -> dict[str, Any] | None:
        await asyncio.sleep(delays[session])
        return await run_session(config, url, session, plans[session], level, on_turn)

    started = time.monotonic()
    infos = await asyncio.gather(*(one(s) for s in range(level)))
    result.wall_s = time.monotonic() - started
    result.sessions = [info for info in infos if info]
    result.turns.sort(key=lambda t: (t.session, t.turn))
    return result


async def run_sweep(config: BenchConfig, url: str, prompts: Sequence[Prompt],
                    progress: Any = None) -> list[LevelResult]:
    rng = random.Random(config.seed)
    levels = []
    for level in sorted(config.concurrency):
        levels.append(await run_level(config, url, prompts, level, rng, progress))
    return levels


def total_turns(config: BenchConfig) -> int:
    return sum(level * config.turns_per_session(level) for level in config.concurrency)


def make_report(config: BenchConfig, levels: Sequence[LevelResult], *, url: str,
                corpus: dict[str, Any], command: str | None = None,
                server: dict[str, Any] | None = None, notes: str | None = None
                ) -> dict[str, Any]:
    """The report dict: sweep summaries, per-turn records, where and what was measured."""
    shared = config.shared_clock
    announced = next((s for lv in levels for s in lv.sessions if "model" in s), {})
    server = {**(server or {}), **announced}   # what a session was told wins over /healthz
    report_config = {
        "protocol": config.protocol,
        "url": url,
        "model": server.get("model"),
        "asr": server.get("asr"),
        "tts": server.get("tts"),
        "stop_secs": config.stop_secs if config.stop_secs is not None
        else server.get("stop_secs"),
        "corpus": corpus,
        "holdout_voices": list(config.holdout_voices),
        "turns_per_session": {str(lv.level): config.turns_per_session(lv.level)
                              for lv in levels},
        "clock": "shared (server on this machine: endpointing from the true end of speech)"
        if shared else "separate (endpointing as estimated by the server)",
        "command": command,
        "machine": machine_info(),
        "versions": {**package_versions(), "git": git_revision()},
        "bench": {k: v for k, v in asdict(config).items()
                  if k not in ("twilio_auth_token", "out", "notes", "progress")},
        "output_sample_rate": server.get("output_sample_rate"),
        "server_warnings": server.get("warnings") or [],
        # the server's own description from its /healthz (machine, versions): in --url mode
        # "machine"/"versions" above describe the load generator, not the server
        "server": {k: server[k] for k in ("machine", "versions") if server.get(k)} or None,
    }
    if config.protocol == "twilio" and not any(t.server for lv in levels for t in lv.turns):
        report_config["measured_stages"] = ["voice_to_voice_ms"]  # no server log was read
    per_level = {lv.level: [t.stages(shared) for t in lv.turns] for lv in levels}
    report = build_report(kind="voice", config=report_config,
                          points=[lv.point(shared, config.holdout_voices) for lv in levels],
                          stages=VOICE_STAGES + (("speech_stopped_to_audio_ms",)
                                                 if config.protocol == "realtime" else ()),
                          analysis=tail_findings(per_level), notes=notes)
    report["cutoff_2pct"] = cutoff_points([{"stop_secs": report_config["stop_secs"],
                                             "sweep": report["sweep"]}])
    report["turns"] = [t.to_dict(shared) for lv in levels for t in lv.turns]
    return report
