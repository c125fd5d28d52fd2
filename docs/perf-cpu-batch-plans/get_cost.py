"""What one batch PlanCache.get costs at a new geometry, on the keys of the middle blocks of a
real decode (tiny fixtures, one torch thread, 64 tokens, low_confidence 2 passes a block):
- "first": a fresh cache every call (every row part new);
- "new positions": the cache has seen these rows' shapes, not this geometry (its plans are
  dropped before each get, its row parts kept): what a get costs in steady state.
Before the assembled batch plans (2f5df6d) both are a full build.

    python docs/perf-cpu-batch-plans/get_cost.py   (whichever diffvoice is importable:
    PYTHONPATH=<a package dir linking diffvoice to another checkout> measures that one)"""

import tempfile
import time

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.pass_plan import PlanCache
from diffvoice.engine.rowbatch import row_key
from diffvoice.engine.testing import decode_in_this_thread, make_random_checkpoint

torch.set_num_threads(1)
for family in ("sdar", "fast_dllm_v2"):
    path = make_random_checkpoint(tempfile.mkdtemp(), family=family, seed=1, init_std=0.5)
    for batch in (4, 16):
        engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                           max_running=16))
        params = SamplingParams(max_new_tokens=64, ignore_eos=True, decoding="fast",
                                policy="low_confidence", steps_per_block=2)
        seqs = [engine.prepare([{"role": "user", "content": "hello there how are you " *
                                 (1 + i % 3)}], params) for i in range(batch)]
        keys, step = [], engine.runner.step

        def recorded(rows, *args, _step=step, keys=keys, **kwargs):
            keys.append(tuple(row_key(r) for r in rows))
            return _step(rows, *args, **kwargs)

        engine.runner.step = recorded
        decode_in_this_thread(engine, *seqs)
        r = engine.runner
        middle = list(dict.fromkeys(keys[4:-6]))  # each geometry once (a block's passes share)

        def fresh(r=r):
            return PlanCache(r.model, r.kv, r.device, r.T, r.mask_id, r.shift)

        best_first = best_known = float("inf")
        for _ in range(7):
            t0 = time.perf_counter()
            for k in middle:
                fresh().get(k)
            t1 = time.perf_counter()
            for _ in middle:
                fresh()
            t2 = time.perf_counter()
            best_first = min(best_first, ((t1 - t0) - (t2 - t1)) / len(middle))
            cache = fresh()
            for k in middle:
                cache.get(k)
            built0, bound0 = cache.built, cache.bound
            elapsed = 0.0
            for k in middle:
                cache.plans.clear()
                t0 = time.perf_counter()
                cache.get(k)
                elapsed += time.perf_counter() - t0
            best_known = min(best_known, elapsed / len(middle))
        print(f"{family} batch {batch}: first {best_first * 1e6:.0f} us, new positions "
              f"{best_known * 1e6:.0f} us (min of 7 over {len(middle)} geometries; in steady "
              f"state {cache.built - built0} built, {cache.bound - bound0} assembled)")
        engine.close()
