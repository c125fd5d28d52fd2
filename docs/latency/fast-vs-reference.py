"""`python docs/latency/fast-vs-reference.py FAMILY` from the checkout root (docs/fidelity.md).

decoding="fast" against the family's own rules on its golden fixture (tests/engine/golden): the
same 8 golden prompts, 32 tokens with ignore_eos, `policy=None` (each side's default rule; for
fast_dllm_v2 also `policy="threshold"` on both sides), batch 1 (one request after another) and
batch 8 (concurrent), 3 rounds with the order alternating, median tok/s through
Engine.generate. Prints one JSON line.
"""

import asyncio
import json
import statistics
import sys
import time

sys.path.insert(0, "tests/engine")
from golden_loops import GOLDEN, load_golden  # noqa: E402

from diffvoice.engine import Engine, EngineConfig, SamplingParams  # noqa: E402


def main(family: str) -> dict:
    _, golden = load_golden(family)
    prompts = [golden["prompts"][i % len(golden["prompts"])] for i in range(8)]
    engine = Engine.from_pretrained(GOLDEN / family / "fixture",
                                    EngineConfig(max_running=8, dtype="float32"))

    async def one(messages, params):
        n = passes = 0
        async for d in engine.generate(messages, params):
            n += len(d.token_ids)
            passes = d.passes or passes
        return n, passes

    async def run(params, concurrency):
        t0 = time.perf_counter()
        if concurrency == 1:
            results = [await one(m, params) for m in prompts]
        else:
            results = await asyncio.gather(*(one(m, params) for m in prompts))
        tok_s = sum(n for n, _ in results) / (time.perf_counter() - t0)
        return tok_s, sum(p for _, p in results) / len(results)

    out = {}
    try:
        for policy in (None, "threshold") if family == "fast_dllm_v2" else (None,):
            for concurrency in (1, 8):
                runs = {"reference": [], "fast": []}
                for rnd in range(4):  # round 0 warms up
                    order = ("reference", "fast") if rnd % 2 == 0 else ("fast", "reference")
                    for decoding in order:
                        params = SamplingParams(max_new_tokens=32, ignore_eos=True,
                                                decoding=decoding, policy=policy)
                        result = asyncio.run(run(params, concurrency))
                        if rnd:
                            runs[decoding].append(result)
                tok_s = {d: statistics.median(t for t, _ in r) for d, r in runs.items()}
                out[f"policy={policy} batch{concurrency}"] = {
                    "fast_over_reference_tok_s": tok_s["fast"] / tok_s["reference"],
                    "passes_per_request": {d: r[0][1] for d, r in runs.items()}}
    finally:
        engine.close()
    return {family: out}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1])))
