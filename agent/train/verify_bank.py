"""Write the record of the training questions the model answers as trained (agent.verify_bank,
which reads it at serving time).

    python -m diffvoice.agent.train.verify_bank --model DIR  # DIR/paraphrase_verified.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import torch
import yaml

from diffvoice.agent.clarify import DEFAULT_THRESHOLD
from diffvoice.agent.data import normalize
from diffvoice.agent.facts import parse_facts
from diffvoice.agent.paraphrase import _entries_for
from diffvoice.agent.train.evaluate import DEFAULT_SETTINGS, parse_setting, path_params
from diffvoice.agent.verify_bank import VERIFIED_FILE, bank_digest, targets, weights_digest
from diffvoice.engine import Engine, EngineConfig


async def _answer_all(engine, questions: list[str], params, concurrency: int,
                      deadline: float | None = None, progress=None) -> list[tuple]:
    """(reply, first-block confidence) per question; (None, None) for those not started by
    `deadline` (time.monotonic()). `progress(line)` hears how far it got every ~30 s."""
    gate = asyncio.Semaphore(concurrency)
    done, started, last_line = [0], time.monotonic(), [time.monotonic()]

    async def one(q: str) -> tuple[str | None, float | None]:
        async with gate:
            if deadline is not None and time.monotonic() >= deadline:
                return None, None
            result = await _answer(q)
            done[0] += 1
            if progress is not None and time.monotonic() - last_line[0] >= 30.0:
                last_line[0] = time.monotonic()
                progress(f"verifying: {done[0]}/{len(questions)} questions decoded "
                         f"({time.monotonic() - started:.0f} s)")
            return result

    async def _answer(q: str) -> tuple[str, float | None]:
        text, last = "", None
        async for delta in engine.generate([{"role": "user", "content": q}], params):
            text += delta.text
            last = delta
        return text.strip(), getattr(last, "first_block_confidence", None)

    return await asyncio.gather(*(one(q) for q in questions))


def verify(model_dir: str | Path, facts: str | Path | None = None, concurrency: int = 16,
           threads: int = 2, out: str | Path | None = None, every: int = 1,
           deadline: float | None = None, progress=None) -> dict:
    """Decode every snap target of the model's bank once (`every` k-th one only: for tests), as
    served; write and return the record of those answered exactly as trained and confidently.
    Questions not started by `deadline` (time.monotonic()) count as missed (reply None): a
    record cut short verifies fewer questions, never one it did not decode."""
    torch.set_num_threads(threads)
    model_dir = Path(model_dir)
    facts_path = Path(facts) if facts else model_dir / "facts.yaml"
    text = facts_path.read_text(encoding="utf-8")
    entries = _entries_for(text)
    picks = targets(entries)[::every]
    params = path_params("tools", parse_setting(DEFAULT_SETTINGS[0], 64),
                         parse_facts(yaml.safe_load(text)))
    engine = Engine.from_pretrained(model_dir, EngineConfig(max_running=concurrency,
                                                            max_queued=len(picks)))
    t0 = time.perf_counter()
    try:
        engine.warmup()
        replies = asyncio.run(_answer_all(engine, [entries[i].text for i in picks], params,
                                          concurrency, deadline, progress))
    finally:
        engine.close()
    missed = [{"question": entries[i].text, "trained": entries[i].reply, "reply": reply,
               "first_block_conf": None if conf is None else round(conf, 3)}
              for i, (reply, conf) in zip(picks, replies, strict=True)
              if reply is None or normalize(reply) != normalize(entries[i].reply)
              or conf is None or conf < DEFAULT_THRESHOLD]
    record = {"digest": bank_digest(list(entries)), "weights": weights_digest(model_dir),
              "setting": DEFAULT_SETTINGS[0], "path": "tools",
              "clarify_threshold": DEFAULT_THRESHOLD, "every": every, "n": len(picks),
              "n_answered": len(picks) - len(missed),
              "n_not_decoded": sum(reply is None for reply, _ in replies),
              "seconds": round(time.perf_counter() - t0, 1), "missed": missed}
    Path(out or model_dir / VERIFIED_FILE).write_text(json.dumps(record, indent=1) + "\n")
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.agent.train.verify_bank",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--model", type=Path, default=None,
                        help="receptionist model directory (default: the shipped one)")
    parser.add_argument("--facts", type=Path, default=None)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    if args.model is None:
        from diffvoice.engine.assets import default_model_dir

        args.model = default_model_dir()
    rec = verify(args.model, args.facts, args.concurrency, args.threads)
    print(f"{rec['n_answered']} of {rec['n']} training questions answered as trained "
          f"({rec['seconds']} s): {Path(args.model) / VERIFIED_FILE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
