"""What one PlanCache.get costs: a build (a fresh cache every call) against a get of a known
shape at new positions (a bind), on the keys of the middle blocks of a real decode (tiny
fixtures, one torch thread, 64 tokens, low_confidence 2 passes a block).

    python docs/perf-cpu-plans/get_cost.py > docs/perf-cpu-plans/get_cost.txt"""

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
    for batch in (1, 16):
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
        middle = keys[4:-6]

        def fresh(r=r):
            return PlanCache(r.model, r.kv, r.device, r.T, r.mask_id, r.shift)

        best_build = best_get = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for k in middle:
                fresh().get(k)
            t1 = time.perf_counter()
            for _ in middle:
                fresh()
            t2 = time.perf_counter()
            best_build = min(best_build, ((t1 - t0) - (t2 - t1)) / len(middle))
            cache = fresh()
            for k in middle:
                cache.get(k)
            t0 = time.perf_counter()
            for k in middle:
                cache.get(k)
            best_get = min(best_get, (time.perf_counter() - t0) / len(middle))
        print(f"{family} batch {batch}: build {best_build * 1e6:.0f} us, get of a known shape "
              f"at new positions {best_get * 1e6:.0f} us (min of 5; {cache.built} built, "
              f"{cache.bound} bound over {2 * len(middle)} gets of {len(middle)} passes' keys)")
        engine.close()
