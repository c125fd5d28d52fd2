"""Pass plans before and after shape keys (issue 40 item 3), on the tests' tiny fixtures, as the
engine core decodes them (engine.testing.decode_in_this_thread: scheduler + runner on this
thread, one torch thread, eager): plans built and re-anchored per pass and wall time per pass,
split into the model's forward and everything else, min of 7 repetitions of 8 batches of
prompts never sent before (random words: new lengths, new positions).

    python docs/perf-cpu-plans/plans_ab.py FAMILY BATCH POLICY OUT.json
Runs whichever diffvoice is importable (run.sh puts the older checkout first on PYTHONPATH)."""

import json
import random
import sys
import tempfile
import time

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import decode_in_this_thread, make_random_checkpoint

family, batch, policy, out = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
torch.set_num_threads(1)
path = make_random_checkpoint(tempfile.mkdtemp(), family=family, seed=1, init_std=0.5)
engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                   max_running=16))
knobs = (dict(policy="low_confidence", steps_per_block=2) if policy == "fixed"
         else dict(policy="threshold", threshold=0.9))
params = SamplingParams(max_new_tokens=32, ignore_eos=True, decoding="fast", **knobs)
words = "hello there when do you open on saturday book me a cleaning please thanks".split()
rng = random.Random(0)
passes, forward = [0], [0.0]
step, model = engine.runner.step, engine.runner.model


def counted(*args, **kwargs):
    passes[0] += 1
    return step(*args, **kwargs)


def timed(fn):
    def run(*args, **kwargs):
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            forward[0] += time.perf_counter() - t0
    return run


engine.runner.step = counted
for name in ("forward_step", "forward_rows"):  # forward_rows: only in checkouts before 2026-12-06
    if hasattr(model, name):
        setattr(model, name, timed(getattr(model, name)))


def run() -> None:
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(batch)]
    decode_in_this_thread(engine, *[engine.prepare([{"role": "user", "content": t}], params)
                                    for t in texts])


for _ in range(3):  # warm-up
    run()
plans = engine.runner.plans
n0, built0, bound0 = passes[0], plans.built, getattr(plans, "bound", 0)
best = None
for _ in range(7):
    p0, forward[0] = passes[0], 0.0
    t0 = time.perf_counter()
    for _ in range(8):
        run()
    wall, n = time.perf_counter() - t0, passes[0] - p0
    row = {"wall_us_per_pass": wall / n * 1e6, "forward_us_per_pass": forward[0] / n * 1e6,
           "other_us_per_pass": (wall - forward[0]) / n * 1e6}
    best = row if best is None or row["wall_us_per_pass"] < best["wall_us_per_pass"] else best
n = passes[0] - n0
result = {"family": family, "batch": batch, "policy": policy, "passes": n,
          "plan_builds_per_pass": (plans.built - built0) / n,
          "plan_binds_per_pass": (getattr(plans, "bound", 0) - bound0) / n, **best}
json.dump(result, open(out, "w"), indent=1)
print(json.dumps(result))
