"""The model's forward paths against each other (issue 40, item 5: "one runner path"), on real
passes of the engine core (engine.testing.decode_in_this_thread), one torch thread, eager:

  (a) the signed-residual batch-1 forward vs the planned forward without it, batch 1, on a
      decode pass (window + shift tokens, no K/V stored) and a fused commit pass (stores the
      finished block's K/V, decodes the next block);
  (b) the planned forward (an AttnPlan) vs the unplanned generic path, batch 1 and batch 16;
  (c) logits for the policy's window rows only vs every window row's logits, batch 1.

Models: the tests' tiny random-weight fixture (engine.testing.make_random_checkpoint, SDAR and
Fast-dLLM v2 layouts) and the shipped receptionist (models/receptionist-tiny, loaded as
`diffvoice bench engine` loads it). The first pass of each kind met while decoding is taken
(the runner's own PassPlan and input ids) and both variants run on it, interleaved (A B, B A,
...), REPS times each; medians and the ratio B / A are reported, and the outputs compared.
Running a variant more than once is harmless: a pass rewrites the same K/V.

    python docs/perf-cpu-forward/forward_paths.py OUT.json
A path the checkout no longer has is reported as absent: since issue 40 item 5 (the commit after
b9cf89a) there is no signed forward and no logit-row forward, and the unplanned forward is
forward_step with plan=None (its geometry built for the pass, as fixed-shape passes run)."""

import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.assets import default_model_dir
from diffvoice.engine.loader import load_checkpoint
from diffvoice.engine.testing import decode_in_this_thread, make_random_checkpoint

REPS = 150
torch.set_num_threads(1)
out_path = sys.argv[1]


def timed_pair(a, b, reps=REPS):
    """Medians (µs) of a() and b() run alternately, the order swapped every repetition."""
    ta, tb = [], []
    for _ in range(5):
        a(), b()
    for i in range(reps):
        for fn, acc in ((a, ta), (b, tb)) if i % 2 == 0 else ((b, tb), (a, ta)):
            t0 = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t0)
    return statistics.median(ta) * 1e6, statistics.median(tb) * 1e6


def compare(name, a, b, a_label, b_label):
    with torch.inference_mode():
        la, lb = a(), b()
        equal = bool(torch.allclose(la, lb, rtol=1e-4, atol=1e-4 * float(lb.abs().max())))
        ma, mb = timed_pair(a, b)
    row = {"case": name, "A": a_label, "B": b_label, "A_us": round(ma, 1), "B_us": round(mb, 1),
           "B_over_A": round(mb / ma, 3), "allclose": equal,
           "max_abs_diff": float((la - lb).abs().max())}
    print(json.dumps(row), flush=True)
    return row


def engine_for(loaded_or_path):
    cfg = EngineConfig(device="cpu", enforce_eager=True, max_running=16, prefix_cache=False)
    if isinstance(loaded_or_path, str):
        return Engine.from_pretrained(loaded_or_path, cfg)
    return Engine(loaded_or_path, cfg)


def measure(model_name, engine, prompts) -> list[dict]:
    runner, model = engine.runner, engine.runner.model
    kv = runner.kv
    rows, seen = [], set()
    get = runner.plans.get

    def signed(ids, pp, start=None, end=None):
        if hasattr(model, "_forward_signed"):
            return lambda: model._forward_signed(ids, pp.logits_start if start is None
                                                 else start, pp.attn, end)
        return None

    def planned(ids, pp, no_signed):
        def run():
            keep = getattr(model, "signed_layers", None)
            if no_signed:
                model.signed_layers = None
            try:
                return model.forward_step(ids, pp.positions, pp.key_valid, kv, pp.slots,
                                          pp.visible, pp.cache_len_max, pp.write_pos,
                                          pp.logits_start, plan=pp.attn)
            finally:
                model.signed_layers = keep
        return run

    def unplanned(ids, pp):
        return lambda: model.forward_step(ids, pp.positions, pp.key_valid, kv, pp.slots,
                                          pp.visible, pp.cache_len_max, pp.write_pos,
                                          pp.logits_start, plan=None)

    def hook(keys):
        pp = get(keys)
        b = len(keys)
        kind = ("decode" if pp.write_pos is None else
                "commit" if pp.L <= 2 * pp.W else "prefill")
        if kind == "prefill" or b not in (1, 16) or (b, kind) in seen or pp.attn is None:
            return pp
        seen.add((b, kind))
        ids = (runner.seq[pp.ids_view[0]:pp.ids_view[0] + 1, pp.ids_view[1]:pp.ids_view[2]]
               if pp.ids_view is not None else runner.seq[pp.slot_col, pp.gather_pos]).clone()
        tag = f"{model_name} b{b} {kind} (L={pp.L}, W={pp.W})"
        fs = signed(ids, pp)
        if b == 1:
            if fs is not None and model._signed_applies(ids, pp.attn):
                rows.append(compare(f"(a) {tag}", fs, planned(ids, pp, True), "signed",
                                    "planned"))
            else:
                rows.append({"case": f"(a) {tag}", "signed": "absent"})
            if not hasattr(pp, "logit_rows"):
                rows.append({"case": f"(c) {tag}", "forward_rows": "absent"})
            if getattr(pp, "logit_rows", None) is not None:
                lo, hi = pp.logit_rows
                s = pp.logits_start
                if hasattr(model, "_forward_signed"):  # forward_rows ran on the signed path
                    rows.append(compare(
                        f"(c) {tag}, rows [{lo}, {hi}) of {pp.W}",
                        lambda: model.forward_rows(ids, kv, s + lo, s + hi, pp.attn),
                        lambda: planned(ids, pp, False)()[:, lo:hi],
                        "logit rows only", "every window row"))
                else:
                    rows.append({"case": f"(c) {tag}", "forward_rows": "absent"})
        rows.append(compare(f"(b) {tag}", planned(ids, pp, b == 1), unplanned(ids, pp),
                            "planned" + (" (no signed)" if b == 1 and fs is not None else ""),
                            "unplanned"))
        return pp

    runner.plans.get = hook
    try:
        for b in (1, 16):
            params = SamplingParams(max_new_tokens=24, ignore_eos=True, decoding="fast",
                                    policy="low_confidence", steps_per_block=2)
            seqs = [engine.prepare([{"role": "user", "content": prompts[i % len(prompts)]}],
                                   params) for i in range(b)]
            decode_in_this_thread(engine, *seqs)
    finally:
        runner.plans.get = get
    return rows


PROMPTS = ["hello, when do you open on saturday?", "can I book a cleaning for tomorrow?",
           "how much is a checkup", "thanks, goodbye", "do you take new patients"]
t_start = time.time()
commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
dirty = subprocess.run(["git", "status", "--porcelain", "--", "engine"], capture_output=True,
                       text=True).stdout.strip() != ""
results = []
for family in ("sdar", "fast_dllm_v2"):
    path = make_random_checkpoint(tempfile.mkdtemp(), family=family, seed=1, init_std=0.5)
    engine = engine_for(str(path))
    try:
        results += measure(f"fixture-{family}", engine, PROMPTS)
    finally:
        engine.close()
loaded = load_checkpoint(default_model_dir(), dtype="float32", device="cpu")
engine = engine_for(loaded)
try:
    results += measure("receptionist", engine, PROMPTS)
finally:
    engine.close()

report = {
    "what": "forward paths of issue 40 item 5, medians of interleaved repetitions (µs), "
            "B_over_A > 1: A is faster",
    "note": "measured on a shared 2-core VM (other work was running): compare ratios only, "
            "not absolute times",
    "reps": REPS, "torch_threads": 1, "torch": torch.__version__,
    "machine": {"platform": platform.platform(), "processor": platform.processor(),
                "machine": platform.machine(), "python": platform.python_version(),
                "cpus": __import__("os").cpu_count()},
    "git_commit": commit.strip(), "engine_dirty": dirty,
    "utc": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "runtime_s": round(time.time() - t_start, 1), "results": results}
with open(out_path, "w") as f:
    json.dump(report, f, indent=1)
print(f"wrote {out_path} ({report['runtime_s']} s)")
