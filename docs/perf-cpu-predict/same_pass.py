"""Prediction over the committable slots against the whole window, timed on the same passes:
an engine with EngineConfig.predict_masked on decodes the prompts; at every pass where it
predicts fewer slots than the window, the pass's prediction work is timed both ways,
alternately, 3 times each, on the same inputs (the forward's K/V writes are the same either
way): whole window = forward + predict over [B, W, V]; selected = pick the slots (topk over the
maskable slots) + forward for them + predict over [B, K, V] + scatter back to the window.
Both run on the engine's worker thread, one torch thread; batch 1 included, where the engine
does not pick slots (runner.MASKED_MIN_BATCH). Prints µs per such pass, per model
and batch. `python docs/perf-cpu-predict/same_pass.py > docs/perf-cpu-predict/same_pass.txt`."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams, runner
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.sampling import predict
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.latency_bench.engine_workload import prompt_messages, random_model

QUESTIONS = Path("docs/latency/receptionist-questions.txt")


def models(tmp: Path):
    fast = dict(decoding="fast", policy="low_confidence", ignore_eos=True, max_new_tokens=32)
    for family in ("sdar", "fast_dllm_v2"):
        path = make_random_checkpoint(tmp / family, family=family, seed=1, init_std=0.5)
        yield (f"fixture {family}", load_checkpoint(path, dtype="float32", device="cpu"),
               SamplingParams(steps_per_block=2, **fast), None)
    yield ("receptionist", load_checkpoint(Path("models/receptionist-tiny"), dtype="float32",
                                           device="cpu"),
           SamplingParams(decoding="fast", policy="low_confidence", steps_per_block=4,
                          max_new_tokens=48),
           [q.strip() for q in QUESTIONS.read_text().splitlines() if q.strip()])
    yield ("tiny-10m", random_model("tiny-10m", torch.device("cpu"), torch.float32, 0,
                                    tmp / "tok"), SamplingParams(steps_per_block=4, **fast), None)


class Timer:
    def __init__(self, engine: Engine):
        self.whole = self.selected = 0.0
        self.passes = self.slots = self.window = 0
        runner = engine.runner
        forward, mask_id = runner._forward, runner.mask_id

        def predicted(logits, b):
            return predict(logits, mask_id, [0.0] * b, [None] * b, need_entropy=False)

        def timed(ids, plan, select=None):
            if select is None:
                return forward(ids, plan, None)
            b, k, w = select.shape[0], select.shape[1], plan.W
            cur = ids[:, plan.L - w:]
            maskable = (cur == mask_id) & plan.in_block
            for _ in range(3):
                t0 = time.perf_counter()
                logits, _ = forward(ids, plan, None)
                predicted(logits, b)
                t1 = time.perf_counter()
                idx = maskable.to(torch.uint8).topk(k, dim=-1, sorted=False).indices
                logits, _ = forward(ids, plan, idx)
                pred, conf, _ = predicted(logits, b)
                cur.scatter(1, idx, pred)
                torch.zeros(cur.shape, dtype=conf.dtype).scatter_(1, idx, conf)
                t2 = time.perf_counter()
                self.whole += t1 - t0
                self.selected += t2 - t1
            self.passes += 3
            self.slots += k
            self.window += w
            return forward(ids, plan, select)

        runner._forward = timed


async def decode(engine: Engine, chats, params, batch: int) -> None:
    async def one(m):
        async for _ in engine.generate(m, params):
            pass
    for i in range(0, len(chats), batch):
        await asyncio.gather(*(one(m) for m in chats[i:i + batch]))


def main() -> None:
    runner.MASKED_MIN_BATCH = 1  # every batch size, the one the engine leaves out included
    with tempfile.TemporaryDirectory() as tmp:
        for name, loaded, params, questions in models(Path(tmp)):
            chats = prompt_messages(loaded.tokenizer, 16, None, questions)
            for batch in (1, 4, 16):
                engine = Engine(loaded, EngineConfig(max_running=16, max_seq_len=512,
                                                     enforce_eager=True))
                try:
                    asyncio.run(decode(engine, chats, params, batch))  # warm-up
                    t = Timer(engine)
                    asyncio.run(decode(engine, chats, params, batch))
                    n = t.passes
                    print(f"{name:18s} batch {batch:2d}: {n // 3} passes predicted "
                          f"{t.slots / (n // 3):.1f} of {t.window / (n // 3):.1f} slots a row; "
                          f"whole window {t.whole / n * 1e6:,.0f} µs, selected "
                          f"{t.selected / n * 1e6:,.0f} µs a pass "
                          f"(ratio {t.selected / t.whole:.3f})", flush=True)
                finally:
                    engine.close()


if __name__ == "__main__":
    main()
