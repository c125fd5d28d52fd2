"""tok/s at batch 1 on a golden fixture: the authors' own decoding loop (upstream code, run beside
the project) vs the engine (Engine.generate, its KV cache, as users run it) vs the plain loop of
engine/reference_loops.py, plus the engine's batch-8 aggregate. Not a test and not in make test:
it needs the upstream files named in PROVENANCE.md (never committed) and transformers 4.53.1.

    UPSTREAM=/path/with/sdarpkg,v2pkg,dreampkg,model(llada)  UPSTREAM_LOOPS=/path/with/sdar,llada,
    fdllm_llada  PYTHONPATH=<transformers 4.53.1> python tests/engine/golden/speed_vs_upstream.py \\
        FAMILY [REPS] [--out FILE.json]

Every golden case of the family (same fixture, prompts, settings), REPS times, measured two ways:
- interleaved (`tok_per_s`, `engine_vs_upstream`, ...): per case the upstream loop, the engine,
  the plain loop and the engine core (scheduler + runner driven in this thread) run back to
  back, so load shifts hit all of them. Each request through `Engine.generate` then follows
  other model work in the caller's thread and finds the engine worker idle: it pays the worker's
  wake-up and runs on caches the caller just used for something else.
- steady (`steady_*`): each of the four runs all the cases back to back, in turn (the order
  rotates per repetition), as a client sending one request after another sees it.
The engine's answers are asserted equal to the goldens (the tokens the upstream loop produced).
One torch thread. Prints one JSON line (tok/s and ratios) and appends it, with the date and load
average, to --out.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import io
import json
import os
import sys
import time
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
UPSTREAM = os.environ.get("UPSTREAM", "/work/scratch/famdec/pk")
LOOPS = os.environ.get("UPSTREAM_LOOPS", "/work/scratch/famdec/up")
sys.path[:0] = [UPSTREAM, os.environ.get("UPSTREAM_LLADA", UPSTREAM + "_llada")]

from golden_loops import GOLDEN, load_golden  # noqa: E402

from diffvoice.engine import Engine, EngineConfig, SamplingParams  # noqa: E402
from diffvoice.engine.reference_loops import run_case  # noqa: E402
from diffvoice.engine.testing import decode_in_this_thread  # noqa: E402


def _load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def upstream_loop(family: str, fixture: Path, mask: int, eos: int):
    """-> a function case -> the upstream call's output (greedy, the golden settings)."""
    if family == "sdar":
        sys.path.insert(0, f"{LOOPS}/sdar")
        import generate as gen  # SDAR's generate.py
        from sdarpkg.modeling_sdar import SDARForCausalLM

        def greedy(logits, temperature=1.0, top_k=0, top_p=1.0):  # see PROVENANCE.md
            probs = F.softmax(logits.float(), dim=-1)
            tok = probs.argmax(-1)
            return tok, probs.gather(-1, tok[..., None]).squeeze(-1)

        gen.sample_with_temperature_topk_topp = greedy
        model = SDARForCausalLM.from_pretrained(fixture, torch_dtype=torch.float32,
                                                attn_implementation="sdpa").eval()
        return lambda c: gen.block_diffusion_generate(
            model, {"input_ids": torch.tensor([c["prompt_ids"]])}, mask,
            gen_length=c["max_new_tokens"], temperature=0.0, stopping_criteria_idx=[eos],
            **c["setting"])
    if family == "fast_dllm_v2":
        from v2pkg.modeling import Fast_dLLM_QwenForCausalLM
        model = Fast_dLLM_QwenForCausalLM.from_pretrained(fixture,
                                                          torch_dtype=torch.float32).eval()
        return lambda c: model.generate(
            torch.tensor([c["prompt_ids"]]), max_new_tokens=c["upstream_max_new_tokens"],
            mask_id=mask, block_size=32, stop_token=eos, temperature=0, **c["setting"])
    if family == "llada":
        from model.modeling_llada import LLaDAModelLM
        gsai = _load("gsai", f"{LOOPS}/llada/generate.py")
        fdllm = _load("fdllm", f"{LOOPS}/fdllm_llada/generate.py")
        model = LLaDAModelLM.from_pretrained(fixture, torch_dtype=torch.float32).eval()

        def run(c):
            loop = gsai if c["loop"] == "gsai" else fdllm
            return loop.generate(model, torch.tensor([c["prompt_ids"]]), temperature=0.0,
                                 remasking="low_confidence", mask_id=mask, **c["setting"])
        return run
    from dreampkg.modeling_dream import DreamModel
    model = DreamModel.from_pretrained(fixture, torch_dtype=torch.float32,
                                       attn_implementation="sdpa").eval()

    def run(c):
        st = c["setting"]
        with contextlib.redirect_stdout(io.StringIO()):
            return model.diffusion_generate(
                torch.tensor([c["prompt_ids"]]), attention_mask=None,
                max_new_tokens=st["max_new_tokens"], steps=st["steps"], temperature=0.0,
                top_p=None, top_k=None, alg=st["alg"], alg_temp=0.0, output_history=False,
                return_dict_in_generate=True)
    return run


def main(family: str, reps: int, out: Path | None) -> dict:
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    loaded, golden = load_golden(family)
    cases, prompts = golden["cases"], golden["prompts"]
    fixture = GOLDEN / family / "fixture"
    upstream = upstream_loop(family, fixture, loaded.config.mask_token_id,
                             loaded.config.eos_token_ids[0])
    ntok = sum(len(c["answer"]) for c in cases) * reps
    engine = Engine.from_pretrained(fixture, EngineConfig(max_running=8, dtype="float32"))

    async def one(c):
        ids = []
        async for d in engine.generate(prompts[c["prompt"]], SamplingParams(**c["engine_params"])):
            ids += d.token_ids
        return ids

    def core(c):  # the engine's scheduler + runner driven in this thread (no worker thread)
        seq = engine.prepare(prompts[c["prompt"]], SamplingParams(**c["engine_params"]))
        decode_in_this_thread(engine, seq)
        return seq.generated

    res = dict.fromkeys(("upstream", "engine", "plain", "engine_core"), 0.0)
    steady = dict.fromkeys(res, 0.0)

    async def run_one(name, c):
        if name == "upstream":
            with torch.inference_mode():
                upstream(c)
        elif name == "engine":
            assert await one(c) == c["answer"]
        elif name == "plain":
            with torch.inference_mode():
                run_case(family, loaded.model, loaded.config, c)
        else:
            assert core(c) == c["answer"]

    async def measure():
        for name in res:  # warm-up
            await run_one(name, cases[0])
        for _ in range(reps):  # per case, the four back to back: load shifts hit all of them
            for c in cases:
                for name in res:
                    t = time.perf_counter()
                    await run_one(name, c)
                    res[name] += time.perf_counter() - t
        names = list(steady)
        for r in range(reps):  # steady state: each runs every case back to back, in turn
            for name in names[r % 4:] + names[:r % 4]:
                t = time.perf_counter()
                for c in cases:
                    await run_one(name, c)
                steady[name] += time.perf_counter() - t
        t = time.perf_counter()
        for _ in range(reps):
            got = []
            for i in range(0, len(cases), 8):
                got += await asyncio.gather(*(one(c) for c in cases[i:i + 8]))
            assert got == [c["answer"] for c in cases]
        res["engine_batch8"] = time.perf_counter() - t

    load_before = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    asyncio.run(measure())
    engine.close()
    tps = {k: ntok / v for k, v in res.items()}
    sps = {k: ntok / v for k, v in steady.items()}
    report = {
        "family": family, "started": started, "reps": reps, "answer_tokens": ntok,
        "answers_identical_to_goldens": f"{len(cases) * reps}/{len(cases) * reps}",
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "tok_per_s": {k: round(v, 1) for k, v in tps.items()},
        "engine_vs_upstream": round(tps["engine"] / tps["upstream"], 2),
        "engine_core_vs_upstream": round(tps["engine_core"] / tps["upstream"], 2),
        "engine_vs_plain_loop": round(tps["engine"] / tps["plain"], 2),
        "batch8_vs_upstream": round(tps["engine_batch8"] / tps["upstream"], 2),
        "steady_tok_per_s": {k: round(v, 1) for k, v in sps.items()},
        "steady_engine_vs_upstream": round(sps["engine"] / sps["upstream"], 2),
        "steady_engine_core_vs_upstream": round(sps["engine_core"] / sps["upstream"], 2),
        "torch_threads": torch.get_num_threads(),
    }
    print(json.dumps(report))
    if out is not None:
        with out.open("a") as f:
            f.write(json.dumps(report) + "\n")
    return report


if __name__ == "__main__":
    args = sys.argv[1:]
    target = None
    if "--out" in args:
        i = args.index("--out")
        target = Path(args[i + 1])
        del args[i:i + 2]
    main(args[0], int(args[1]) if len(args) > 1 else 1, target)
