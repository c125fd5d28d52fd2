"""A development set that is not an evaluation set: the served path (paraphrase and intent
snapping, the receptionist's tools, grounding, the clarify guard — as `eval-model` runs it) on
the fact / small-talk rows of the training ASR cache (asr_train.jsonl: *training* questions spoken
by the training voices and written down by each recogniser). Rules about how recognisers write
words are worked out here, then measured once on the independent sets by `eval-model`.

    python -m diffvoice.agent.train.dev_asr --out dev.json [--limit N]

Only for the default fact sheet (the cache's questions are about Bluebird Dental).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict
from pathlib import Path

from diffvoice.agent.data import DataGenerator, Example
from diffvoice.agent.facts import load_facts
from diffvoice.agent.paraphrase import INTENT_THRESHOLD
from diffvoice.agent.templates import SMALL_TALK_INTENTS
from diffvoice.agent.train import evaluate as ev
from diffvoice.agent.train.asking import eval_agent
from diffvoice.agent.train.asr_augment import TRAIN_CACHE, load_cache
from diffvoice.engine import Engine, EngineConfig


def dev_examples(gen: DataGenerator, path: str | Path = TRAIN_CACHE) -> list[Example]:
    """One Example per fact / small-talk row of the cache (booking openers are left out: their
    expected reply depends on the calendar); template "dev:<recogniser>:<voice>"."""
    out = []
    for r in load_cache(path):
        try:
            answer, facts = gen.answer(r["intent"], r.get("slot"))
        except (KeyError, ValueError, StopIteration):
            continue  # a booking intent, or a slot the fact sheet no longer has
        kind = "small_talk" if r["intent"] in SMALL_TALK_INTENTS else "fact"
        out.append(Example(r["intent"], r.get("slot"), f"dev:{r['asr']}:{r['voice']}",
                           r["heard"] or "...", answer, facts, kind, ()))
    return out


def run(model: str | Path | None = None, limit: int | None = None, threads: int = 2,
        intent_snap: float | None = INTENT_THRESHOLD) -> dict:
    """The served path at its defaults over the dev rows; `intent_snap`: the intent head's
    threshold (as `eval-model --intent-snap`; None = off)."""
    import torch

    from diffvoice.agent.paraphrase import ParaphraseSnap
    from diffvoice.engine.assets import default_model_dir

    torch.set_num_threads(threads)
    model = Path(model) if model else default_model_dir()
    gen = DataGenerator(load_facts(model / "facts.yaml"))
    examples = dev_examples(gen)[:limit]
    engine = Engine.from_pretrained(model, EngineConfig(max_running=1,
                                                        max_queued=max(1, len(examples))))
    snap = ParaphraseSnap.for_model(model, save=False, intent_threshold=intent_snap)
    agent = eval_agent(gen, snap, ev.DEFAULT_THRESHOLD)  # as served
    try:
        engine.warmup()
        params = ev.path_params("tools", ev.parse_setting(ev.DEFAULT_SETTINGS[0], 64), gen.facts)
        replies = asyncio.run(ev._run(engine, gen, examples, params, 1, agent))
    finally:
        engine.close()
    by_asr: dict[str, list] = {}
    for r in replies:
        by_asr.setdefault(r.template.split(":")[1], []).append(r)
    return {"model": str(model), "intent_snap": intent_snap, "n": len(replies),
            "summary": ev.summarize(replies),
            "per_recogniser": {k: ev.summarize(v) for k, v in sorted(by_asr.items())},
            "failures": [asdict(r) for r in replies if not r.correct]}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m diffvoice.agent.train.dev_asr",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="checkpoint directory (default: shipped)")
    ap.add_argument("--limit", type=int, default=None, help="the first N rows only")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--intent-snap", type=float, default=INTENT_THRESHOLD, metavar="PROBABILITY",
                    help=f"the intent head's threshold (default {INTENT_THRESHOLD}, as served; "
                         "above 1 = off)")
    ap.add_argument("--out", default=None, help="write the report here (JSON)")
    args = ap.parse_args(argv)
    report = run(args.model, args.limit, args.threads,
                 None if args.intent_snap > 1 else args.intent_snap)
    for name, s in [("all", report["summary"]), *report["per_recogniser"].items()]:
        print(f"{name:22s} n={s['n']:5d} right {s['accuracy']:.1%} "
              f"well-formed {s['well_formed_rate']:.1%}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
