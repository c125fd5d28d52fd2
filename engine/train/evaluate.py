"""Evaluate a receptionist checkpoint through the real Engine (the code path users run).

For every held-out question of the fact sheet (engine.train.data.DataGenerator.eval_set) and every
decoding setting, one reply is generated with `Engine.generate` and scored:
  correct   the normalized reply contains every normalized fact value of the question
  ended     the reply ended by itself (finish_reason "stop": EOS, no stop strings are passed)
  exact     the normalized reply equals the reference answer (a fluency proxy: the training data
            has one phrasing per question)
plus reply length (tokens, words) and latency (first committed block, whole reply). Requests are
sent one at a time by default so latency is per reply, not per batch. Knows nothing about training.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from engine import Engine, EngineConfig, SamplingParams
from engine.train.data import DataGenerator, Example, normalize
from engine.train.facts import load_facts

DEFAULT_SETTINGS = ("low_confidence:2", "low_confidence:4", "low_confidence:8", "threshold:0.9")


def parse_setting(spec: str, max_new_tokens: int) -> SamplingParams:
    """'low_confidence:4' (steps per block), 'threshold:0.9', 'entropy:0.5' -> SamplingParams."""
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
    raise ValueError(f"setting {spec!r} must be low_confidence:N, threshold:P or entropy:G")


@dataclass
class Reply:
    question: str
    intent: str
    kind: str
    expected: str
    text: str
    correct: bool
    ended: bool
    exact: bool
    tokens: int
    words: int
    first_block_s: float | None
    total_s: float


def score(example: Example, text: str) -> tuple[bool, bool]:
    norm = normalize(text)
    correct = all(normalize(f) in norm for f in example.facts)
    return correct, norm == normalize(example.answer)


async def _ask(engine: Engine, example: Example, params: SamplingParams) -> Reply:
    text, last = "", None
    t0 = time.perf_counter()
    async for delta in engine.generate([{"role": "user", "content": example.question}], params):
        text += delta.text
        last = delta
    total = time.perf_counter() - t0
    correct, exact = score(example, text)
    return Reply(example.question, example.intent, example.kind, example.answer, text.strip(),
                 correct, last.finish_reason == "stop", exact, last.completion_tokens,
                 len(text.split()), last.first_block_latency_s, total)


async def _run_setting(engine: Engine, examples: list[Example], params: SamplingParams,
                       concurrency: int) -> list[Reply]:
    gate = asyncio.Semaphore(concurrency)

    async def one(ex: Example) -> Reply:
        async with gate:
            return await _ask(engine, ex, params)

    return list(await asyncio.gather(*(one(ex) for ex in examples)))


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))] if values else float("nan")


def summarize(replies: list[Reply]) -> dict:
    facts = [r for r in replies if r.kind == "fact"]
    talk = [r for r in replies if r.kind == "small_talk"]
    totals = [r.total_s for r in replies]
    firsts = [r.first_block_s for r in replies if r.first_block_s is not None]
    return {
        "n": len(replies), "n_fact": len(facts), "n_small_talk": len(talk),
        "fact_accuracy": sum(r.correct for r in facts) / max(1, len(facts)),
        "small_talk_accuracy": sum(r.correct for r in talk) / max(1, len(talk)),
        "eos_rate": sum(r.ended for r in replies) / max(1, len(replies)),
        "exact_rate": sum(r.exact for r in replies) / max(1, len(replies)),
        "mean_tokens": statistics.fmean(r.tokens for r in replies) if replies else 0.0,
        "mean_words": statistics.fmean(r.words for r in replies) if replies else 0.0,
        "latency_mean_s": statistics.fmean(totals) if totals else float("nan"),
        "latency_p50_s": _pct(totals, 0.5), "latency_p90_s": _pct(totals, 0.9),
        "first_block_p50_s": _pct(firsts, 0.5),
    }


def per_intent(replies: list[Reply]) -> dict[str, float]:
    out: dict[str, list[bool]] = {}
    for r in replies:
        out.setdefault(r.intent, []).append(r.correct)
    return {k: sum(v) / len(v) for k, v in sorted(out.items())}


def evaluate(model: str | Path, facts: str | Path | None = None,
             settings: tuple[str, ...] = DEFAULT_SETTINGS, per_template: int = 1,
             limit: int | None = None, max_new_tokens: int = 64, concurrency: int = 1,
             seed: int = 1234, use_chitchat: bool = True, threads: int = 2) -> dict:
    """Run every setting over the held-out set; returns a JSON-able report."""
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
    examples = gen.eval_set(seed=seed, per_template=per_template)
    if limit is not None and limit < len(examples):
        step = len(examples) / limit  # evenly spaced: keeps every intent represented
        examples = [examples[int(i * step)] for i in range(limit)]
    all_params = [(spec, parse_setting(spec, max_new_tokens)) for spec in settings]
    engine = Engine.from_pretrained(model, EngineConfig(max_running=max(1, concurrency),
                                                        max_queued=len(examples)))
    report: dict = {"model": str(model), "facts": str(facts_path), "n_questions": len(examples),
                    "concurrency": concurrency, "threads": threads, "settings": {}}
    try:
        engine.warmup()
        for spec, params in all_params:
            t0 = time.perf_counter()
            replies = asyncio.run(_run_setting(engine, examples, params, concurrency))
            report["settings"][spec] = {
                "summary": summarize(replies), "per_intent": per_intent(replies),
                "wall_s": round(time.perf_counter() - t0, 1),
                "failures": [asdict(r) for r in replies if not (r.correct and r.ended)][:40],
                "samples": [asdict(r) for r in replies[:: max(1, len(replies) // 12)]]}
    finally:
        engine.close()
    return report


def markdown_table(report: dict) -> str:
    lines = ["| setting | fact acc. | small-talk acc. | ends with EOS | exact | mean tokens | "
             "mean words | latency mean / p50 / p90 (s) | first block p50 (s) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for spec, res in report["settings"].items():
        s = res["summary"]
        lines.append(
            f"| {spec} | {s['fact_accuracy']:.1%} ({s['n_fact']}) | "
            f"{s['small_talk_accuracy']:.1%} ({s['n_small_talk']}) | {s['eos_rate']:.1%} | "
            f"{s['exact_rate']:.1%} | {s['mean_tokens']:.1f} | {s['mean_words']:.1f} | "
            f"{s['latency_mean_s']:.3f} / {s['latency_p50_s']:.3f} / {s['latency_p90_s']:.3f} | "
            f"{s['first_block_p50_s']:.3f} |")
    return "\n".join(lines)
