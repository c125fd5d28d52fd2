"""`diffvoice bench engine`: the engine's first-block latency and throughput, against the vanilla
LLaDA loop on the same model, written in the shared report format (latency_bench.report).

What it measures (all greedy, answers forced to equal length with ignore_eos):
  ttft_ms            request submitted -> first committed block delivered (batch 1, p50/p90/p99)
  tok_per_s          answer tokens / wall time, one request at a time
  vanilla.tok_per_s  the reference loop: whole sequence recomputed every pass, one token
                     committed per pass, no cache (engine.vanilla.reference_decode)
  reference_loop     the model family's own decoding loop (its authors' code, re-implemented
                     plainly in engine.reference_loops) with the same settings, batch 1;
                     speedup_vs_reference_loop = tok_per_s / its tok/s, and how many answers
                     are token-identical (decoding "reference", the default)
  batch8.aggregate_tok_per_s   8 concurrent requests in the one engine
  by_context         ttft / tok/s as the prompt grows (--context 128,1024,4096), and the
                     first-block time of the next turn of the same conversations, which
                     reuses their cached blocks
  host_reads_per_block, plan_builds_per_pass, plan_binds_per_pass, host_us_per_pass   the
                     worker's own work at each --host-batches level on prompts the warm-up did
                     not send (latency_bench.engine_host: reads per block round, plans built and
                     re-anchored per pass, busy time outside the forward per pass), eager
  aten_ops_per_layer_pass   aten operators one decoder layer dispatches per pass, for the
                     --aten-ops-preset shape (2-layer less 1-layer copies, CPU, batch 1), and
                     device_ops_per_layer_pass, those that do device work (no views or
                     allocations); with --aten-ops-kernels triton the same for the GPU's
                     decode path (fields ending in _triton; a Triton launch is one operator)
The model is built in memory with random weights (nothing is downloaded); `--model DIR` measures a
checkpoint instead. Knows nothing about voice.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.decoding import resolve
from diffvoice.engine.loader import LoadedModel, load_checkpoint
from diffvoice.engine.reference_loops import loop_for
from diffvoice.engine.vanilla import reference_decode
from diffvoice.latency_bench.engine_workload import PRESETS, prompt_messages, random_model


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", type=Path, default=Path("docs/latency/engine-cpu.json"),
                        help="report JSON (.md/.html/.png written beside it)")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="tiny-10m",
                        help="random-weight model shape (ignored with --model)")
    parser.add_argument("--model", type=Path, default=None,
                        help="measure this checkpoint directory instead of a random preset")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto")
    parser.add_argument("--prompts", type=int, default=20, help="prompts per measurement")
    parser.add_argument("--prompts-file", type=Path, default=None,
                        help="user questions, one per line (default: a built-in mixed text)")
    parser.add_argument("--answer-tokens", type=int, default=32, help="answer length (forced)")
    parser.add_argument("--policy", default="low_confidence",
                        help="unmasking policy: low_confidence, threshold or entropy")
    parser.add_argument("--steps-per-block", type=int, default=2,
                        help="denoising passes per block (low_confidence policy)")
    parser.add_argument("--threshold", type=float, default=0.9, help="threshold policy's tau")
    parser.add_argument("--decoding", default="reference", choices=["reference", "fast"],
                        help="the family's own decoding (default) or the engine's departures")
    parser.add_argument("--stop-at-eos", action="store_true",
                        help="let answers end at EOS (both loops) instead of forcing "
                             "--answer-tokens; tok/s then counts the tokens actually produced")
    parser.add_argument("--block-size", type=int, default=None,
                        help="decode block (default: the model's)")
    parser.add_argument("--batch", type=_ints, default=[1, 8],
                        help="concurrency levels, comma-separated (aggregate tok/s each)")
    parser.add_argument("--context", type=_ints, default=[],
                        help="prompt lengths in tokens for the by_context sweep, e.g. 128,1024")
    parser.add_argument("--vanilla-prompts", type=int, default=None,
                        help="prompts for the vanilla loop (default: --prompts)")
    parser.add_argument("--compare-graphs", action="store_true",
                        help="also run with CUDA graphs disabled (--enforce-eager) on CUDA")
    parser.add_argument("--seed", type=int, default=0, help="weight and prompt seed")
    parser.add_argument("--block-step-passes", type=int, default=16,
                        help="most passes run back to back before one read of the device "
                             "(EngineConfig.block_step_passes; 1 = a read after every pass)")
    parser.add_argument("--worker-threads", type=int, default=None,
                        help="torch threads on the engine's worker thread "
                             "(EngineConfig.worker_threads; 0 = torch's default)")
    parser.add_argument("--overlap", choices=["auto", "on", "off"], default="auto",
                        help="queue a block step before the previous one is read "
                             "(EngineConfig.overlap; auto = on a CUDA device only)")
    parser.add_argument("--predict-masked", choices=["on", "off"], default="on",
                        help="predict only the window slots a pass may commit "
                             "(EngineConfig.predict_masked)")
    parser.add_argument("--host-batches", type=_ints, default=[1, 16],
                        help="concurrency levels of the host profile (empty: none)")
    parser.add_argument("--aten-ops-preset", default="qwen2.5-1.5b",
                        help="model shape whose aten ops per layer per pass are counted "
                             "(a --preset name; 'none' to skip)")
    parser.add_argument("--aten-ops-kernels", default="torch", choices=["torch", "triton",
                                                                         "torch,triton"],
                        help="decode path(s) counted: torch (what a CPU runs) and/or triton "
                             "(the GPU's fused kernels, under Triton's CPU interpreter: slow; "
                             "its fields end in _triton)")


def _knobs(args: argparse.Namespace) -> dict:
    """The EngineConfig fields the bench's flags set (both of its engines)."""
    return dict(block_step_passes=args.block_step_passes, worker_threads=args.worker_threads,
                overlap=OVERLAP[args.overlap], predict_masked=args.predict_masked == "on")


async def _one(engine: Engine, messages, params) -> tuple[float, float, int]:
    t0 = time.perf_counter()
    first, n = None, 0
    async for d in engine.generate(messages, params):
        if first is None and d.token_ids:
            first = time.perf_counter() - t0
        n += len(d.token_ids)
    return first or 0.0, time.perf_counter() - t0, n


async def measure(engine: Engine, chats, params, concurrency: int) -> dict:
    """Run `chats` with `concurrency` requests in flight; latencies in ms, aggregate tok/s."""
    sem = asyncio.Semaphore(concurrency)

    async def guarded(m):
        async with sem:
            return await _one(engine, m, params)

    t0 = time.perf_counter()
    results = await asyncio.gather(*(guarded(m) for m in chats))
    wall = time.perf_counter() - t0
    tokens = sum(r[2] for r in results)
    return {"ttft": [r[0] * 1000 for r in results], "total": [r[1] * 1000 for r in results],
            "tokens": tokens, "wall_s": wall, "aggregate_tok_per_s": tokens / wall}


def _graph_shapes(engine: Engine) -> int:
    """CUDA graphs (fixed-shape passes) the engine holds so far; 0 without them."""
    static = engine.runner.static
    return sum(st.graph is not None for st in static.shapes.values()) if static else 0


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_vanilla(loaded: LoadedModel, chats, answer_tokens: int, device: torch.device,
                ignore_eos: bool = True) -> dict:
    cfg = loaded.config
    block = cfg.block_size if cfg.block_causal else 32
    params = SamplingParams(max_new_tokens=answer_tokens, steps_per_block=block,
                            block_size=block, ignore_eos=ignore_eos)
    tokens, passes = 0, 0
    _sync(device)
    t0 = time.perf_counter()
    for m in chats:
        ids, n = reference_decode(loaded.model, cfg, loaded.tokenizer.encode_chat(m), params)
        tokens += len(ids)
        passes += n
    _sync(device)
    wall = time.perf_counter() - t0
    return {"tok_per_s": tokens / wall, "tokens": tokens, "passes": passes, "wall_s": wall,
            "loop": "full sequence recomputed every pass, one token committed per pass, no cache"}


async def _answers(engine: Engine, chats, params) -> list[list[int]]:
    out = []
    for m in chats:
        ids = []
        async for d in engine.generate(m, params):
            ids += d.token_ids
        out.append(ids)
    return out


def run_reference_loop(loaded: LoadedModel, engine: Engine, chats, params: SamplingParams,
                       device: torch.device) -> dict | None:
    """The family's own loop at batch 1 on `chats`, and whether the engine's answers match."""
    resolved, _ = resolve(params, loaded.config)
    loop = loop_for(loaded.model, resolved, loaded.config)
    if loop is None or not params.ignore_eos:
        return None
    tokens, same = 0, 0
    engine_ids = asyncio.run(_answers(engine, chats, params))
    _sync(device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for m, mine in zip(chats, engine_ids, strict=True):
            ids = loop(loaded.tokenizer.encode_chat(m))
            tokens += len(ids)
            same += ids == mine
    _sync(device)
    wall = time.perf_counter() - t0
    return {"tok_per_s": tokens / wall, "tokens": tokens, "wall_s": wall,
            "policy": resolved.policy, "answers_identical": same, "answers": len(chats),
            "loop": f"{loaded.config.family}'s own decoding loop (engine.reference_loops), "
                    "whole sequence recomputed every pass, batch 1"}


def _unseen(chats: list[list[dict]]) -> list[list[dict]]:
    """The chats with a few words added to each last message: prompts of other lengths."""
    return [m[:-1] + [{**m[-1], "content": m[-1]["content"] + " Thanks, one more time."}]
            for m in chats]


OVERLAP = {"auto": None, "on": True, "off": False}


def host_fields(loaded: LoadedModel, chats, params: SamplingParams, args, max_ctx: int) -> dict:
    """host_reads_per_block / plan_builds_per_pass / host_us_per_pass per --host-batches level
    and aten_ops_per_layer_pass (latency_bench.engine_host)."""
    from diffvoice.latency_bench.engine_host import aten_ops_per_layer_pass, host_profile

    out: dict = {}
    if args.host_batches:
        top = max(args.host_batches)
        engine = Engine(loaded, EngineConfig(max_running=top, max_seq_len=max_ctx,
                                             enforce_eager=True, max_queued=4 * top + 64,
                                             **_knobs(args)))
        try:
            profiles = {}
            for b in sorted(set(args.host_batches)):
                work = (chats * b)[: max(len(chats), 2 * b)]
                asyncio.run(measure(engine, work, params, b))  # warm-up
                # measured on prompts the warm-up did not send (each a few tokens longer):
                # positions new to the engine, as new callers' are
                profiles[str(b)] = host_profile(engine, _unseen(work), params, b)
        finally:
            engine.close()
        out["host_profile"] = profiles
        for key in ("host_reads_per_block", "plan_builds_per_pass", "plan_binds_per_pass",
                    "host_us_per_pass"):
            out[key] = {b: p[key] for b, p in profiles.items()}
    if args.aten_ops_preset != "none":
        mc = loaded.config  # its tokenizer's ids, inside every preset's vocabulary
        for kernels in args.aten_ops_kernels.split(","):
            counts = aten_ops_per_layer_pass(PRESETS[args.aten_ops_preset], loaded.tokenizer,
                                             mc.mask_token_id, mc.eos_token_ids[0], params,
                                             kernels=kernels)
            suffix = "" if kernels == "torch" else f"_{kernels}"
            out.update({f"{key}{suffix}": value for key, value in counts.items()})
        out["aten_ops_preset"] = args.aten_ops_preset
    return out


def run(args: argparse.Namespace) -> int:
    from diffvoice.latency_bench.outputs import write_outputs
    from diffvoice.latency_bench.report import SweepPoint, build_report
    from diffvoice.latency_bench.stats import summarize
    from diffvoice.voice.machine import git_revision, machine_info, package_versions

    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else ("cpu" if args.device == "auto" else args.device))
    dtype = {"auto": torch.bfloat16 if device.type == "cuda" else torch.float32,
             "float32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}[args.dtype]
    if args.model:
        loaded = load_checkpoint(args.model, dtype=str(dtype).removeprefix("torch."),
                                 device=str(device))
    else:
        loaded = random_model(args.preset, device, dtype, args.seed,
                              Path(tempfile.mkdtemp(prefix="diffvoice-bench-tokenizer-")))
    n_params = sum(p.numel() for p in loaded.model.parameters())
    max_ctx = max([*args.context, 256]) + args.answer_tokens + 256  # history overshoots a turn
    batches = sorted(set(args.batch))
    params = SamplingParams(max_new_tokens=args.answer_tokens, steps_per_block=args.steps_per_block,
                            block_size=args.block_size, policy=args.policy,
                            threshold=args.threshold, ignore_eos=not args.stop_at_eos,
                            decoding=args.decoding)
    modes = [("graphs", False), ("eager", True)] if args.compare_graphs else [("default", False)]
    questions = None
    if args.prompts_file:
        questions = [q.strip() for q in args.prompts_file.read_text().splitlines() if q.strip()]
    chats = prompt_messages(loaded.tokenizer, args.prompts, None, questions)
    results, points = {}, []
    for mode, eager in modes:
        engine = Engine(loaded, EngineConfig(max_running=max(batches), max_seq_len=max_ctx,
                                             enforce_eager=eager, max_queued=4 * args.prompts,
                                             **_knobs(args)))
        try:
            per_batch, warmup = {}, {}
            for b in batches:
                # Warm-up at each level on every prompt once (lazy init, Triton compiles, one
                # CUDA graph per new shape: a first-seen shape costs a capture, which the
                # measured runs must not include); what it cost is reported beside them.
                shapes0 = _graph_shapes(engine)
                t0 = time.perf_counter()
                asyncio.run(measure(engine, (chats * b)[: max(len(chats), b)], params, b))
                warmup[b] = {"wall_s": time.perf_counter() - t0,
                             "graph_shapes_captured": _graph_shapes(engine) - shapes0}
                per_batch[b] = asyncio.run(measure(
                    engine, chats * (1 if b == 1 else max(1, b // 4)), params, b))
                per_batch[b]["graph_shapes_captured_while_measured"] = (
                    _graph_shapes(engine) - shapes0 - warmup[b]["graph_shapes_captured"])
            by_context = {}
            for ctx in args.context:
                ctx_chats = prompt_messages(loaded.tokenizer, min(args.prompts, 5), ctx)
                r = asyncio.run(measure(engine, ctx_chats, params, 1))
                by_context[str(ctx)] = {"ttft_ms": summarize(r["ttft"]),
                                        "tok_per_s": r["aggregate_tok_per_s"],
                                        "prompt_tokens": len(loaded.tokenizer.encode_chat(
                                            ctx_chats[0]))}
                # the same conversations one turn later: their cached blocks are reused
                followups = [m + [{"role": "assistant", "content": "Sure."},
                                  {"role": "user", "content": "And what about Saturday?"}]
                             for m in ctx_chats]
                reused_before = engine.stats()["reused_prefix_tokens"]
                f = asyncio.run(measure(engine, followups, params, 1))
                by_context[str(ctx)]["next_turn_ttft_ms"] = summarize(f["ttft"])
                by_context[str(ctx)]["next_turn_reused_tokens_mean"] = (
                    engine.stats()["reused_prefix_tokens"] - reused_before) / len(followups)
                if mode == modes[0][0]:  # the vanilla loop on one such prompt, for the ratio
                    v = run_vanilla(loaded, ctx_chats[:1], args.answer_tokens, device,
                                    ignore_eos=not args.stop_at_eos)
                    by_context[str(ctx)]["vanilla_tok_per_s"] = v["tok_per_s"]
                    by_context[str(ctx)]["speedup_vs_vanilla"] = (r["aggregate_tok_per_s"]
                                                                  / v["tok_per_s"])
            if mode == modes[0][0]:
                ref_loop = run_reference_loop(loaded, engine, chats[: args.vanilla_prompts or
                                                                    args.prompts], params, device)
        finally:
            engine.close()
        results[mode] = {"per_batch": per_batch, "by_context": by_context, "warmup": warmup}
    head = results[modes[0][0]]
    b1 = head["per_batch"][batches[0]]
    for b, r in head["per_batch"].items():
        points.append(SweepPoint(concurrency=b, samples={"ttft_ms": r["ttft"],
                                                         "request_ms": r["total"]},
                                 turns=len(r["ttft"]), wall_s=r["wall_s"]))
    vanilla_chats = chats[: args.vanilla_prompts or args.prompts]
    vanilla = run_vanilla(loaded, vanilla_chats, args.answer_tokens, device,
                          ignore_eos=not args.stop_at_eos)
    cfg = loaded.config
    config = {
        "benchmark": "engine", "machine": machine_info(), "versions": package_versions(),
        "git": git_revision(), "device": str(device), "dtype": str(dtype).removeprefix("torch."),
        "model": {"name": loaded.name, "params": n_params, **{k: v for k, v in asdict(cfg).items()
                                                              if k != "eos_token_ids"}},
        "answer_tokens": args.answer_tokens, "prompts": args.prompts,
        "params": asdict(params), "batches": batches, "modes": [m for m, _ in modes],
        "command": "diffvoice bench engine " + " ".join(
            f"--{k.replace('_', '-')}" + ("" if v is True else
                                          f" {','.join(map(str, v)) if isinstance(v, list) else v}")
            for k, v in vars(args).items()
            if k not in ("bench_command", "command", "func", "log_level")
            and v not in (None, False, [])),
    }
    report = build_report(kind="engine", config=config, points=points, stages=["ttft_ms",
                                                                               "request_ms"])
    s = summarize(b1["ttft"])
    report["ttft_ms"] = {"p50": s["p50"], "p90": s["p90"], "p99": s["p99"], "mean": s["mean"]}
    report["tok_per_s"] = b1["aggregate_tok_per_s"]
    report["vanilla"] = vanilla
    report["speedup_vs_vanilla"] = b1["aggregate_tok_per_s"] / vanilla["tok_per_s"]
    if ref_loop is not None:
        report["reference_loop"] = ref_loop
        report["speedup_vs_reference_loop"] = b1["aggregate_tok_per_s"] / ref_loop["tok_per_s"]
    report["mean_answer_tokens"] = {"engine": b1["tokens"] / len(chats),
                                    "vanilla": vanilla["tokens"] / len(vanilla_chats)}
    report["mean_prompt_tokens"] = sum(len(loaded.tokenizer.encode_chat(m))
                                       for m in chats) / len(chats)
    for b, r in head["per_batch"].items():
        report[f"batch{b}"] = {"aggregate_tok_per_s": r["aggregate_tok_per_s"],
                               "per_stream_tok_per_s": r["aggregate_tok_per_s"] / b,
                               "ttft_ms": summarize(r["ttft"]),
                               "graph_shapes_captured_while_measured":
                                   r["graph_shapes_captured_while_measured"]}
    if head["by_context"]:
        report["by_context"] = head["by_context"]
    if len(modes) > 1:
        report["modes"] = {m: {f"batch{b}": {"aggregate_tok_per_s": r["aggregate_tok_per_s"],
                                             "ttft_ms": summarize(r["ttft"])}
                               for b, r in results[m]["per_batch"].items()} for m, _ in modes}
    report["warmup"] = {m: {f"batch{b}": w for b, w in results[m]["warmup"].items()}
                        for m, _ in modes}
    report.update(host_fields(loaded, chats, params, args, max_ctx))
    written = write_outputs(report, args.out)
    print(f"ttft p50 {report['ttft_ms']['p50']:.1f} ms  p99 {report['ttft_ms']['p99']:.1f} ms | "
          f"{report['tok_per_s']:.0f} tok/s vs vanilla {vanilla['tok_per_s']:.0f} tok/s "
          f"(x{report['speedup_vs_vanilla']:.1f})"
          + (f" | x{report['speedup_vs_reference_loop']:.1f} the family's own loop"
             if ref_loop is not None else "")
          + "".join(f" | batch{b} {report[f'batch{b}']['aggregate_tok_per_s']:.0f} tok/s"
                    for b in batches if b > 1))
    print("wrote", ", ".join(str(p) for p in written.values()))
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m diffvoice.latency_bench.engine_bench ...` = `diffvoice bench engine ...`, with
    none of the voice stack's packages imported (a bare CUDA image has torch and little else)."""
    parser = argparse.ArgumentParser(prog="python -m diffvoice.latency_bench.engine_bench",
                                     description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
