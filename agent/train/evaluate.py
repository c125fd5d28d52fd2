"""Evaluate a receptionist checkpoint through the real Engine (the code path users run).

Question sets (each Example carries its chat messages: history, question, tool results):
  template     held-out templates of the fact sheet (DataGenerator.eval_set)
  dialogue     held-out booking / availability / cancel / follow-up turns: held-out phrasings and
               caller names (DataGenerator.dialogue_eval_set)
  independent  the hand-written independent set (agent/train/independent_eval.yaml), text
  spoken       the same questions spoken by espeak voices never used in training and recognised
               by Whisper tiny.en and pocketsphinx (agent/train/independent_asr.jsonl), and by
               Whisper base and with the domain prompt where those rows are cached
  spoken-kokoro  the same, spoken by the natural Kokoro voices (asr_augment EVAL_KOKORO_VOICES;
               no training row is Kokoro-spoken)
(independent/spoken only for the default fact sheet they were written for.)
Scoring of one reply:
  correct      fact / small talk / follow-up: the normalized reply contains every fact value;
               a flow question: the normalized reply equals the expected one; a tool call: the
               parsed call has the right tool and exactly the right arguments
  well_formed  the reply is exactly an answer the fact sheet yields, a flow reply shape or a
               valid tool call (DataGenerator.is_well_formed) — measured on the model's reply
               before the guard: the first decode, or the careful retry that replaced it (a
               reply not well-formed is decoded once more one token per pass and kept when it
               agrees: agent.clarify, as the server does); `well_formed_first`: the first
               decode alone
  clarified    the agent's AFTER rules (agent.pipeline.serve) replaced the reply (first
               block confidence below `clarify_below`, or not well-formed); a clarified reply
               counts as NOT correct in every accuracy. As at run time (the same serve(),
               agent.guard) the first-block test applies only to "fast"-decoded requests (every
               tools request is): the threshold was chosen on their confidences; after a tool
               result the server says the trained result reply instead of the question, and the
               eval scores that reply
  grounding    before the clarify test, as at run time: a booking-flow reply stating a time or
               day nobody said is mended (agent.grounding); `correct` scores what the
               caller hears, `correct_raw` the model's own text
Decoding paths (`paths`), each over every question set:
  free         no tools: the reply is free text; a call counts only if the model spells the wire
               text right (the raw figure)
  tools        what serve, the voice pipeline and the API do for this model: the receptionist's
               tools (agent.booking_schemas.decoding_schemas: open days, the book's start
               times, day/time narrowed to what was said, the name copied from the caller's
               words) passed as `tools` with tool_choice "auto"; the engine's constrained mode
               decides between answering and calling and decodes a call's arguments under the
               slot masks; a decoded call is scored as its wire text
  tools-schema the same without the conversation narrowing (schema-only constraints)
Report keys: `settings[spec][set]` (free), `settings[spec][set+tools]`,
`settings[spec][set+tools-schema]`; `episodes[spec][path]`: closed-loop booking calls
(agent/train/episodes.py: the model's own replies fed back, slot filling over turns). A spoken
set's entry also has `hearing` (agent/train/hearing.py): the transcripts' WER, the share heard
word for word and the accuracy on those and on the misheard rest, overall and per voice.
Requests go one at a time by default so latency is per reply, not per batch.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from diffvoice.agent.clarify import CLARIFY, DEFAULT_THRESHOLD
from diffvoice.agent.data import DataGenerator, Example, normalize
from diffvoice.agent.facts import load_facts
from diffvoice.agent.paraphrase import DEFAULT_THRESHOLD as PARAPHRASE_THRESHOLD
from diffvoice.agent.paraphrase import INTENT_THRESHOLD, ParaphraseSnap
from diffvoice.agent.pipeline import Agent
from diffvoice.agent.tool_schemas import parse_tool_call, tool_call_text
from diffvoice.agent.train.asking import ask, eval_agent
from diffvoice.agent.train.episodes import run_episodes
from diffvoice.agent.train.eval_progress import EvalProgress
from diffvoice.agent.train.hearing import hearing
from diffvoice.agent.train.independent import load_independent
from diffvoice.engine import Engine, EngineConfig, SamplingParams

DEFAULT_SETTINGS = ("low_confidence:4",)
PATHS = ("free", "tools", "tools-schema")
DEFAULT_PATHS = ("free", "tools")


def path_params(path: str, params: SamplingParams, facts) -> SamplingParams:
    """The SamplingParams of one decoding path (see the module docstring)."""
    import dataclasses

    from diffvoice.agent.booking_schemas import decoding_schemas

    if path == "free":
        return params
    if path not in PATHS:
        raise ValueError(f"decoding path {path!r} must be one of {PATHS}")
    tools = decoding_schemas(facts, context=path == "tools")
    return dataclasses.replace(params, tools=tuple(tools), tool_choice="auto")


def parse_setting(spec: str, max_new_tokens: int) -> SamplingParams:
    """'low_confidence:4' (steps per block), 'threshold:0.9', 'entropy:0.5' -> SamplingParams;
    a suffix '@fast' / '@reference' picks SamplingParams.decoding (default: the model's own, as
    serve without tools: its generation_config.json's, 'fast' for receptionists; constrained
    rows always decode 'fast')."""
    import dataclasses

    body, _, decoding = spec.partition("@")
    params = _parse_policy(body, max_new_tokens)
    if decoding:
        try:
            params = dataclasses.replace(params, decoding=decoding)
        except ValueError as exc:
            raise ValueError(f"bad setting {spec!r}: {exc}") from exc
    return params


def _parse_policy(spec: str, max_new_tokens: int) -> SamplingParams:
    policy, _, value = spec.partition(":")
    try:
        if policy == "low_confidence":
            return SamplingParams(max_new_tokens=max_new_tokens, policy=policy,
                                  steps_per_block=int(value or 4))
        if policy == "threshold":
            return SamplingParams(max_new_tokens=max_new_tokens, policy=policy,
                                  threshold=float(value or 0.9))
        if policy == "entropy":
            return SamplingParams(max_new_tokens=max_new_tokens, policy=policy,
                                  entropy_bound=float(value or 0.5))
    except ValueError as exc:
        raise ValueError(f"bad setting {spec!r}: {exc}") from exc
    raise ValueError(f"setting {spec!r} must be low_confidence:N, threshold:P or entropy:G "
                     "(optionally @fast or @reference)")


@dataclass
class Reply:
    question: str
    history: int         # messages before the question
    intent: str
    kind: str
    template: str
    expected: str
    text: str            # the model's raw reply
    final: str           # what the caller hears (after the clarify guard)
    correct: bool        # `final` is right
    correct_raw: bool    # `text` is right (no guard)
    well_formed: bool    # the model's reply is well-formed: `text`, or the careful retry used
    clarified: bool
    is_call: bool        # the expected reply is a tool call
    ended: bool
    exact: bool
    tokens: int
    words: int
    first_block_conf: float | None
    first_block_s: float | None
    total_s: float
    grounding: str | None = None  # agent.grounding: substituted / replaced / ungrounded
    well_formed_first: bool = True  # `text` (the first decode) is well-formed
    retry_text: str | None = None   # the careful retry of a reply that was not well-formed
    retried: bool = False           # ... and it replaced `text` (agent.guard)

    @property
    def mended(self) -> bool:
        return self.grounding in ("substituted", "replaced")

    @property
    def ungrounded(self) -> bool:
        return self.grounding == "ungrounded"


def score(example: Example, text: str) -> tuple[bool, bool]:
    """(correct, exact) of a reply text for an example."""
    norm = normalize(text)
    exact = norm == normalize(example.answer)
    if example.call is not None:
        parsed = parse_tool_call(text)
        want = json.loads(example.call[1])
        return parsed is not None and parsed[0] == want["name"] and \
            parsed[1] == want["arguments"], exact
    if example.kind == "flow":
        return exact, exact
    return all(normalize(f) in norm for f in example.facts), exact


async def _ask(engine: Engine, gen: DataGenerator, example: Example, params: SamplingParams,
               agent: Agent) -> Reply:
    """One question as served (agent.train.asking.ask: the agent's rules through serve()),
    scored on what the caller hears and on what the model said."""
    t0 = time.perf_counter()
    asked = await ask(agent, engine, example.messages(), params)
    total = time.perf_counter() - t0
    text, call, last, record = asked.text, asked.call, asked.last, asked.record
    final = asked.final
    if call is not None:  # a constrained call: scored (and checked) as its wire text
        text = tool_call_text(call["name"], json.loads(call["arguments"]), list(params.tools))
        final = text if not record.clarified else final
    clarified, retried = record.clarified, record.retried
    conf = last.first_block_confidence
    correct_raw, exact = score(example, text)
    correct = score(example, final)[0] if (not clarified or final != CLARIFY) else False
    first_ok = gen.is_well_formed(text)
    return Reply(example.question, len(example.history), example.intent, example.kind,
                 example.template, example.answer, text, final, correct, correct_raw,
                 first_ok or retried, clarified, example.call is not None,
                 last.finish_reason == "stop", exact, last.completion_tokens, len(text.split()),
                 conf, last.first_block_latency_s, total, record.grounding, first_ok,
                 record.retry_text, retried)


async def _run(engine, gen, examples, params, concurrency, agent: Agent) -> list[Reply]:
    gate = asyncio.Semaphore(concurrency)

    async def one(ex: Example) -> Reply:
        async with gate:
            return await _ask(engine, gen, ex, params, agent)

    return list(await asyncio.gather(*(one(ex) for ex in examples)))


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def _rate(replies: list[Reply], attr: str = "correct") -> float | None:
    return sum(getattr(r, attr) for r in replies) / len(replies) if replies else None


def summarize(replies: list[Reply]) -> dict:
    totals = [r.total_s for r in replies]
    firsts = [r.first_block_s for r in replies if r.first_block_s is not None]
    pick = lambda pred: [r for r in replies if pred(r)]  # noqa: E731
    return {
        "n": len(replies),
        "accuracy": _rate(replies), "accuracy_raw": _rate(replies, "correct_raw"),
        "fact_accuracy": _rate(pick(lambda r: r.kind == "fact")),
        "small_talk_accuracy": _rate(pick(lambda r: r.kind == "small_talk")),
        "flow_accuracy": _rate(pick(lambda r: r.kind == "flow")),
        "booking_accuracy": _rate(pick(lambda r: r.is_call)),
        "follow_up_accuracy": _rate(pick(lambda r: r.kind == "follow")),
        "n_fact": len(pick(lambda r: r.kind == "fact")),
        "n_small_talk": len(pick(lambda r: r.kind == "small_talk")),
        "n_flow": len(pick(lambda r: r.kind == "flow")), "n_calls": len(pick(lambda r: r.is_call)),
        "n_follow": len(pick(lambda r: r.kind == "follow")),
        "well_formed_rate": _rate(replies, "well_formed"),
        "well_formed_first_rate": _rate(replies, "well_formed_first"),
        "retried_rate": _rate(replies, "retried"),
        "clarify_rate": _rate(replies, "clarified"),
        "grounded_rate": _rate(replies, "mended"),
        "ungrounded_rate": _rate(replies, "ungrounded"),
        "eos_rate": _rate(replies, "ended"), "exact_rate": _rate(replies, "exact"),
        "mean_tokens": statistics.fmean(r.tokens for r in replies) if replies else 0.0,
        "latency_mean_s": statistics.fmean(totals) if totals else float("nan"),
        "latency_p50_s": _pct(totals, 0.5), "latency_p90_s": _pct(totals, 0.9),
        "first_block_p50_s": _pct(firsts, 0.5),
    }


def per_intent(replies: list[Reply]) -> dict[str, float]:
    out: dict[str, list[bool]] = {}
    for r in replies:
        out.setdefault(r.intent, []).append(r.correct)
    return {k: round(sum(v) / len(v), 3) for k, v in sorted(out.items())}


def question_sets(gen: DataGenerator, seed: int, per_template: int, dialogues: int,
                  independent: bool) -> dict[str, list[Example]]:
    sets = {"template": gen.eval_set(seed=seed, per_template=per_template),
            "dialogue": gen.dialogue_eval_set(seed=seed + 1, n=dialogues)}
    from diffvoice.agent.train.independent import BUSINESS, independent_examples, spoken_examples

    if independent and gen.facts.name == BUSINESS:
        sets["independent"] = independent_examples(gen)
        from diffvoice.agent.train.asr_augment import RECOGNISERS

        for tts, prefix in (("espeak", "spoken"), ("kokoro", "spoken-kokoro")):
            for asr in RECOGNISERS:  # those whose rows are cached
                spoken = spoken_examples(gen, asr=asr, tts=tts)
                if spoken:
                    sets[f"{prefix}:{asr}"] = spoken
    return sets


def evaluate(model: str | Path, facts: str | Path | None = None,
             settings: tuple[str, ...] = DEFAULT_SETTINGS, per_template: int = 1,
             limit: int | None = None, max_new_tokens: int = 64, concurrency: int = 1,
             seed: int = 1234, use_chitchat: bool = True, threads: int = 2,
             dialogues: int = 240, independent: bool = True,
             clarify_below: float = DEFAULT_THRESHOLD,
             paths: tuple[str, ...] = DEFAULT_PATHS, episodes: int = 60,
             paraphrase: float | None = PARAPHRASE_THRESHOLD, grounding: bool = True,
             retry: bool = True, intent_snap: float | None = INTENT_THRESHOLD,
             without: tuple[str, ...] = (), only_sets: tuple[str, ...] = ()) -> dict:
    """Run every setting over every question set; returns a JSON-able report. `paraphrase`:
    the snapping threshold as served (agent.paraphrase), None = the model alone;
    `grounding`: mend restated values as served (agent.grounding); `retry`: the
    clarify guard's careful retry of a blended reply, as served (agent.clarify);
    `intent_snap`: the paraphrase snap's intent-head threshold as served, None = off;
    `without`: the agent's rules left out (agent.train.asking.eval_agent: an ablation);
    `only_sets`: these question sets only (names as in the report; () = all)."""
    import torch

    torch.set_num_threads(threads)
    model = Path(model)
    facts_path = Path(facts) if facts else model / "facts.yaml"
    if not facts_path.is_file():
        raise FileNotFoundError(f"{facts_path}: no fact sheet (pass --facts)")
    if use_chitchat:
        try:
            import chitchat_dataset  # noqa: F401
        except ImportError:
            use_chitchat = False
    gen = DataGenerator(load_facts(facts_path), use_chitchat=use_chitchat)
    sets = question_sets(gen, seed, per_template, dialogues, independent)
    if only_sets:
        missing = set(only_sets) - set(sets)
        if missing:
            raise ValueError(f"unknown question set(s) {sorted(missing)}; known: {list(sets)}")
        sets = {k: v for k, v in sets.items() if k in only_sets}
    if limit is not None:
        for name, examples in sets.items():
            if limit < len(examples):
                step = len(examples) / limit  # evenly spaced: keeps every intent represented
                sets[name] = [examples[int(i * step)] for i in range(limit)]
    all_params = [(spec, parse_setting(spec, max_new_tokens)) for spec in settings]
    for path in paths:
        if path not in PATHS:
            raise ValueError(f"decoding path {path!r} must be one of {PATHS}")
    n_max = max(len(v) for v in sets.values())
    said = ({item["id"]: item["q"] for item in load_independent()}
            if any(name.startswith("spoken") for name in sets) else {})
    engine = Engine.from_pretrained(model, EngineConfig(max_running=max(1, concurrency),
                                                        max_queued=n_max))
    snap = None if paraphrase is None else ParaphraseSnap.for_model(
        model, facts_path, save=False, threshold=paraphrase, intent_threshold=intent_snap)
    agent = eval_agent(gen, snap, clarify_below, grounding, retry, without)  # as served

    report: dict = {"model": str(model), "facts": str(facts_path), "concurrency": concurrency,
                    "threads": threads, "clarify_below": clarify_below, "paraphrase": paraphrase,
                    "intent_snap": intent_snap if paraphrase is not None else None,
                    "grounding": grounding, "retry": retry, "without": list(without),
                    "paths": list(paths),
                    "n_questions": {k: len(v) for k, v in sets.items()}, "settings": {},
                    "episodes": {}}
    progress = EvalProgress(len(all_params) * len(paths) * sum(len(v) for v in sets.values()),
                         len(all_params) * len(paths) * episodes)
    try:
        engine.warmup()
        for spec, params in all_params:
            res: dict = {}
            for path, (name, examples) in [(p, kv) for p in paths for kv in sets.items()]:
                t0 = time.perf_counter()
                replies = asyncio.run(_run(engine, gen, examples,
                                           path_params(path, params, gen.facts), concurrency,
                                           agent))
                name = name if path == "free" else f"{name}+{path}"
                progress.done(f"{spec} {name}", len(examples), replies)
                res[name] = {
                    "summary": summarize(replies), "per_intent": per_intent(replies),
                    "wall_s": round(time.perf_counter() - t0, 1),
                    "failures": [asdict(r) for r in replies if not r.correct][:60],
                    # (first-block confidence, raw reply correct, well-formed) of every reply:
                    # what a clarify threshold is chosen from
                    "confidence": [[None if r.first_block_conf is None else
                                    round(r.first_block_conf, 4), r.correct_raw, r.well_formed]
                                   for r in replies],
                    "samples": [asdict(r) for r in replies[:: max(1, len(replies) // 10)]]}
                if name.startswith("spoken"):
                    res[name]["hearing"] = hearing(replies, said)
            for path in paths:
                suffix = "" if path == "free" else f"+{path}"
                res[f"all{suffix}"] = {"summary": _merge([res[k + suffix]["summary"]
                                                          for k in sets])}
            report["settings"][spec] = res
            if episodes:  # closed-loop booking calls (agent/train/episodes.py)
                report["episodes"][spec] = {}
                for path in paths:
                    report["episodes"][spec][path] = asyncio.run(run_episodes(
                        engine, gen, path_params(path, params, gen.facts), agent, n=episodes,
                        seed=seed + 2))
                    progress.done(f"{spec} closed-loop calls+{path}", 0, None, episodes)
    finally:
        engine.close()
    return report


def _merge(summaries: list[dict]) -> dict:
    summaries = [s for s in summaries if s["n"]]  # an empty set (--dialogues 0) has no rates
    n = sum(s["n"] for s in summaries)
    return {"n": n, **{k: sum(s[k] * s["n"] for s in summaries) / n if n else None
                       for k in ("well_formed_rate", "well_formed_first_rate", "retried_rate",
                                 "clarify_rate")}}


def _fmt(value: float | None, n: int | None = None) -> str:
    if value is None:
        return "-"
    return f"{value:.1%}" + (f" ({n})" if n is not None else "")


def markdown_table(report: dict) -> str:
    lines = ["| setting | set | accuracy | raw (no guard) | fact | small talk | flow | booking "
             "calls | follow-ups | well-formed | clarified | first block p50 (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for spec, res in report["settings"].items():
        for name, body in res.items():
            if name.split("+")[0] == "all":
                continue
            s = body["summary"]
            lines.append(
                f"| {spec} | {name} | {_fmt(s['accuracy'], s['n'])} | {_fmt(s['accuracy_raw'])} |"
                f" {_fmt(s['fact_accuracy'], s['n_fact'])} |"
                f" {_fmt(s['small_talk_accuracy'], s['n_small_talk'])} |"
                f" {_fmt(s['flow_accuracy'], s['n_flow'])} |"
                f" {_fmt(s['booking_accuracy'], s['n_calls'])} |"
                f" {_fmt(s['follow_up_accuracy'], s['n_follow'])} |"
                f" {_fmt(s['well_formed_rate'])} | {_fmt(s['clarify_rate'])} |"
                f" {s['first_block_p50_s']:.3f} |")
        for path, ep in report.get("episodes", {}).get(spec, {}).items():
            lines.append(f"| {spec} | booking calls, closed loop ({path}) |"
                         f" {_fmt(ep['success_rate'], ep['n'])} booked right,"
                         f" {_fmt(ep['confirmed_rate'])} confirmed | | | | | | | | | |")
        for name in [k for k in res if "hearing" in res[k]]:
            h = res[name]["hearing"]
            lines.append(f"| {spec} | {name}, as heard | WER {_fmt(h['wer'])}, word for word"
                         f" {_fmt(h['heard_exactly_rate'])}: right"
                         f" {_fmt(h['accuracy_heard_exactly'])} of those,"
                         f" {_fmt(h['accuracy_misheard'])} of the rest |" + " |" * 9)
        for name in [k for k in res if k.split("+")[0] == "all"]:
            a = res[name]["summary"]
            lines.append(f"| {spec} | {name} | | | | | | | | {_fmt(a['well_formed_rate'], a['n'])}"
                         f" | {_fmt(a['clarify_rate'])} | |")
    return "\n".join(lines)
