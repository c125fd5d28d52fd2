"""Would `torch.compile` bring a pass's work outside the forward to the issue-40 goals on this
CPU (<= 25 us a pass at batch 1, <= 80 us at batch 16)? The post-forward work of a greedy
low_confidence pass (confidence, top-k commit, write, masks left) as one function, eager against
`torch.compile(dynamic=False)` (inductor's C++ on this CPU), on the tiny fixtures' sizes (vocab
400; window 4 at batch 1, 8 at batch 16), one torch thread; and the floor of any compiled call
(`x + 1`). Mean of 2,000 calls after 50 warm-up calls.

    python docs/perf-cpu-compile/compile_floor.py OUT.json
"""

import json
import sys
import time

import torch

torch.set_num_threads(1)
MASK = 7


def after_forward(logits, cur, in_block, steps_left):
    conf, pred = logits.float().softmax(-1).max(-1)
    maskable = (cur == MASK) & in_block
    c = conf.masked_fill(~maskable, -1.0)
    k = torch.clamp((maskable.sum(-1) + steps_left - 1) // steps_left, min=1)
    order = c.argsort(-1, descending=True)
    ranks = torch.arange(cur.shape[1]).expand_as(order)
    rank = torch.empty_like(order).scatter_(-1, order, ranks)
    commit = maskable & (rank < k[:, None])
    new = torch.where(commit, pred, cur)
    return new, ((new == MASK) & in_block).sum(-1), conf


def plus_one(x):
    return x + 1


def timed(fn, *args, n=2000) -> float:
    for _ in range(50):
        fn(*args)
    t0 = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t0) / n * 1e6


out = {"torch": torch.__version__, "threads": 1, "cases": []}
x = torch.zeros(4)
compiled = torch.compile(plus_one, dynamic=False)
t0 = time.perf_counter()
compiled(x)
out["floor"] = {"eager_us": timed(plus_one, x), "compiled_us": timed(compiled, x),
                "compile_s": time.perf_counter() - t0}
for batch, window in ((1, 4), (16, 8)):
    args = (torch.randn(batch, window, 400), torch.full((batch, window), MASK),
            torch.ones(batch, window, dtype=torch.bool), torch.full((batch,), 2))
    compiled = torch.compile(after_forward, dynamic=False)
    t0 = time.perf_counter()
    same = all(torch.equal(a, b)
               for a, b in zip(compiled(*args), after_forward(*args), strict=True))
    compile_s = time.perf_counter() - t0
    out["cases"].append({"batch": batch, "window": window, "vocab": 400, "same_outputs": same,
                         "compile_s": compile_s, "eager_us": timed(after_forward, *args),
                         "compiled_us": timed(compiled, *args)})
json.dump(out, open(sys.argv[1], "w"), indent=1)
print(json.dumps(out, indent=1))
