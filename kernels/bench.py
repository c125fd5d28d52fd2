"""GPU check-and-time script for kernels/, then the engine benchmark.

    python -m diffvoice.kernels.bench --out DIR            # CUDA machine; ~1 min + engine bench
    python -m diffvoice.kernels.bench --out DIR --dry-run  # CPU, Triton interpreter, tiny shapes

For every kernel and realistic size (vocabulary 151936; blocks of 16/32; batch 1 and 32;
Qwen2.5-1.5B attention: 12 query heads, 2 kv heads, head_dim 128, prefix 512/2048; hidden 1536)
it checks the Triton path against the PyTorch reference on random inputs, times both with
`triton.testing.do_bench` (median, L2 flushed before each run), and reports the Triton kernel's
achieved GB/s and its share of the measured device-to-device copy bandwidth. Then
`run_engine_bench` shells out to `diffvoice bench engine ...` (owned by engine/) and folds its
JSON in. Writes DIR/kernels.json and DIR/kernels.md; exits 1 if any check failed, 2 without CUDA
(unless --dry-run). It knows nothing about the engine beyond that one command line.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Sizes:
    vocab: int
    blocks: tuple[int, ...]
    batches: tuple[int, ...]
    q_heads: int
    kv_heads: int
    head_dim: int
    prefixes: tuple[int, ...]
    hidden: int
    copy_mib: int


FULL = Sizes(vocab=151936, blocks=(16, 32), batches=(1, 32), q_heads=12, kv_heads=2,
             head_dim=128, prefixes=(512, 2048), hidden=1536, copy_mib=1024)
DRY = Sizes(vocab=769, blocks=(5,), batches=(1, 2), q_heads=4, kv_heads=2, head_dim=16,
            prefixes=(11,), hidden=123, copy_mib=8)
DTYPE = torch.bfloat16
LOWP_FACTOR, LOWP_ATOL = 2.0, 2.0**-8  # as in tests/kernels/conftest.py


def time_both(fn, device: str) -> tuple[float, float, str]:
    """(device ms, launch-included ms, how the first was measured) per call.

    On CUDA the first is the median of `triton.testing.do_bench_cudagraph`: the calls replayed
    from a captured CUDA graph, so a kernel of a few microseconds is not hidden behind Python's
    launch cost (which is what the engine pays only outside its graphs); the second is
    `do_bench`'s median, each call launched from Python with the L2 flushed before it. A function
    that cannot be captured (a host sync) reports the launched time for both."""
    if device == "cuda":
        from triton.testing import do_bench, do_bench_cudagraph

        launched = float(do_bench(fn, return_mode="median"))
        try:
            graphed = float(do_bench_cudagraph(fn, return_mode="median"))
        except Exception:  # noqa: BLE001 - capture refused (a sync inside): keep the launched time
            torch.cuda.synchronize()
            return launched, launched, "do_bench (not capturable)"
        return graphed, launched, "do_bench_cudagraph"
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        fn()
        runs.append((time.perf_counter() - start) * 1e3)
    ms = sorted(runs)[1]
    return ms, ms, "wall clock"


def copy_bandwidth_gbps(sizes: Sizes, device: str) -> float:
    src = torch.empty(sizes.copy_mib << 20, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    # launched, not graph-replayed: a captured copy becomes a memcpy node, which measured 2.7 TB/s
    # on the H200 against 4.2 TB/s for the copy kernel launched (1 GiB: launch cost is nothing)
    ms = time_both(lambda: dst.copy_(src), device)[1]
    return 2 * src.numel() / (ms * 1e-3) / 1e9  # read + write


def lowp_check(out, ref32, ref_lowp) -> tuple[float, float]:
    err = (out.float() - ref32.float()).abs().max().item()
    base = (ref_lowp.float() - ref32.float()).abs().max().item()
    scale = max(1.0, ref32.float().abs().max().item())
    return err, LOWP_FACTOR * base + LOWP_ATOL * scale


def nbytes(*tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def bench_unmask(sizes, device):
    from diffvoice.kernels.unmask_confidence import unmask_confidence, unmask_confidence_ref

    for batch in sizes.batches:
        for length in sizes.blocks:
            for gather in (False, True):
                logits = torch.randn(batch, length, sizes.vocab, device=device).mul(4).to(DTYPE)
                prev = torch.randn(batch, sizes.vocab, device=device).mul(4).to(DTYPE)
                n = batch * length
                rows = torch.randperm(n, device=device)[: n // 2] if gather else None
                args = dict(prev_logits=prev, shift=True, need_entropy=True, rows=rows)
                got = unmask_confidence(logits, **args)
                want = unmask_confidence_ref(logits, **args)
                err = max((got[1] - want[1]).abs().max().item(),
                          (got[2] - want[2]).abs().max().item())
                ok = torch.equal(got[0], want[0]) and err <= 1e-4
                rows_read = rows.numel() if gather else n
                yield dict(
                    kernel="unmask_confidence",
                    case=f"B={batch} L={length} V={sizes.vocab} shift+entropy"
                         + (f" rows={rows_read}" if gather else ""),
                    bytes=rows_read * sizes.vocab * logits.element_size(),
                    triton=lambda logits=logits, args=args: unmask_confidence(logits, **args),
                    torch=lambda logits=logits, args=args: unmask_confidence_ref(logits, **args),
                    max_err=err, bound=1e-4, ok=ok)


def bench_attention(sizes, device):
    from diffvoice.kernels.block_attention import block_attention, block_attention_ref

    hq, hkv, dim = sizes.q_heads, sizes.kv_heads, sizes.head_dim
    for batch in sizes.batches:
        for length in sizes.blocks:
            for prefix in sizes.prefixes:
                def rnd(*shape):
                    return torch.randn(*shape, device=device).to(DTYPE)

                q, k_new, v_new = rnd(batch, hq, length, dim), rnd(batch, hkv, length, dim), \
                    rnd(batch, hkv, length, dim)
                k_cache, v_cache = rnd(batch, hkv, prefix, dim), rnd(batch, hkv, prefix, dim)
                lens = torch.full((batch,), prefix, device=device, dtype=torch.int32)
                pos = prefix + torch.arange(length, device=device)[None].expand(batch, length)
                valid = torch.ones(batch, length, dtype=torch.bool, device=device)
                inputs = (q, k_new, v_new, k_cache, v_cache, lens, pos, valid, length)
                out = block_attention(*inputs)
                ref32 = block_attention_ref(*[t.float() if torch.is_tensor(t) and
                                              t.is_floating_point() else t for t in inputs])
                err, bound = lowp_check(out, ref32, block_attention_ref(*inputs, upcast=False))
                yield dict(
                    kernel="block_attention",
                    case=f"B={batch} L={length} prefix={prefix} Hq={hq} Hkv={hkv} D={dim}",
                    bytes=nbytes(q, k_new, v_new, k_cache, v_cache, out),
                    flops=4 * batch * hq * length * (prefix + length) * dim,
                    triton=lambda inputs=inputs: block_attention(*inputs),
                    torch=lambda inputs=inputs: block_attention_ref(*inputs),
                    max_err=err, bound=bound, ok=err <= bound)


def bench_rmsnorm(sizes, device):
    from diffvoice.kernels.rmsnorm import rmsnorm, rmsnorm_ref

    for batch in sizes.batches:
        for length in sizes.blocks:
            x = torch.randn(batch, length, sizes.hidden, device=device).to(DTYPE)
            res = torch.randn_like(x)
            w = (1 + 0.1 * torch.randn(sizes.hidden, device=device)).to(DTYPE)
            out, new_res = rmsnorm(x, w, res)
            ref32 = rmsnorm_ref(x.float(), w.float(), res.float())
            err, bound = lowp_check(out, ref32[0], rmsnorm_ref(x, w, res)[0])
            yield dict(
                kernel="rmsnorm", case=f"tokens={batch * length} H={sizes.hidden} +residual",
                bytes=nbytes(x, res, w, out, new_res),
                triton=lambda x=x, w=w, res=res: rmsnorm(x, w, res),
                torch=lambda x=x, w=w, res=res: rmsnorm_ref(x, w, res),
                max_err=err, bound=bound, ok=err <= bound)


def bench_rotary(sizes, device):
    from diffvoice.kernels.rotary import rotary, rotary_ref

    dim = sizes.head_dim
    inv_freq = 1e6 ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float32) / dim)
    angles = torch.arange(4096, device=device, dtype=torch.float32)[:, None] * inv_freq
    angles = torch.cat([angles, angles], -1)  # [P, D]
    cos, sin = angles.cos(), angles.sin()
    for batch in sizes.batches:
        for length in sizes.blocks:
            q = torch.randn(batch, length, sizes.q_heads, dim, device=device).to(DTYPE)
            q = q.transpose(1, 2)  # the model's [B, L, H, D] projection viewed as [B, H, L, D]
            k = torch.randn(batch, sizes.kv_heads, length, dim, device=device).to(DTYPE)
            pos = torch.randint(0, 4096, (batch, length), device=device)
            outs = rotary(q, k, cos, sin, pos)
            refs32 = rotary_ref(q.float(), k.float(), cos, sin, pos)
            lows = rotary_ref(q, k, cos, sin, pos)
            checks = [lowp_check(o, r, lo) for o, r, lo in zip(outs, refs32, lows, strict=True)]
            yield dict(
                kernel="rotary", case=f"B={batch} L={length} Hq={sizes.q_heads} "
                                      f"Hk={sizes.kv_heads} D={dim} table",
                bytes=2 * nbytes(q, k) + 2 * batch * length * dim * 4,
                triton=lambda q=q, k=k, pos=pos: rotary(q, k, cos, sin, pos),
                torch=lambda q=q, k=k, pos=pos: rotary_ref(q, k, cos, sin, pos),
                max_err=max(c[0] for c in checks), bound=min(c[1] for c in checks),
                ok=all(e <= b for e, b in checks))


def run_kernel_benches(sizes: Sizes, device: str, copy_gbps: float) -> list[dict]:
    results = []
    for gen in (bench_unmask, bench_attention, bench_rmsnorm, bench_rotary):
        for case in gen(sizes, device):
            triton_ms, triton_launched_ms, triton_timer = time_both(case.pop("triton"), device)
            torch_ms, torch_launched_ms, torch_timer = time_both(case.pop("torch"), device)
            gbps = case["bytes"] / (triton_ms * 1e-3) / 1e9
            flops = case.pop("flops", None)
            case.update(triton_us=triton_ms * 1e3, torch_us=torch_ms * 1e3,
                        triton_launched_us=triton_launched_ms * 1e3,
                        torch_launched_us=torch_launched_ms * 1e3,
                        timers=f"triton: {triton_timer}, torch: {torch_timer}",
                        speedup=torch_ms / triton_ms, gbps=gbps, pct_copy=100 * gbps / copy_gbps,
                        tflops=(flops / (triton_ms * 1e-3) / 1e12) if flops else None)
            results.append(case)
            print(f"{'ok ' if case['ok'] else 'BAD'} {case['kernel']:18s} {case['case']:48s} "
                  f"{case['triton_us']:9.1f} us {gbps:8.1f} GB/s {case['pct_copy']:5.1f}% "
                  f"x{case['speedup']:.1f} vs torch", flush=True)
    return results


# ---- engine benchmark hook -----------------------------------------------------------------
def engine_bench_command(out_dir: Path) -> list[str]:
    """`diffvoice bench engine ...` through its module, which imports only the engine's packages."""
    return [sys.executable, "-m", "diffvoice.latency_bench.engine_bench", "--preset",
            "qwen2.5-1.5b", "--dtype", "bfloat16", "--device", "cuda", "--batch", "1,32",
            "--compare-graphs", "--out", str(out_dir / "engine.json")]


def run_engine_bench(out_dir: Path, timeout_s: float = 300.0, dry_run: bool = False) -> dict:
    """Run `diffvoice bench engine` and return {status, command, ..., result: its JSON}."""
    cmd = engine_bench_command(out_dir)
    record = {"command": " ".join(cmd)}
    if dry_run:
        return {**record, "status": "skipped (dry run)"}
    start = time.perf_counter()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {**record, "status": f"timed out after {timeout_s:.0f} s"}
    except OSError as exc:
        return {**record, "status": f"could not start: {exc}"}
    record.update(returncode=proc.returncode, wall_s=round(time.perf_counter() - start, 1),
                  output_tail=(proc.stdout + proc.stderr)[-3000:])
    result_path = out_dir / "engine.json"
    if proc.returncode == 0 and result_path.exists():
        record.update(status="ok", result=json.loads(result_path.read_text()))
    else:
        record["status"] = "failed"
    return record


# ---- report -----------------------------------------------------------------------------
def markdown(report: dict) -> str:
    lines = [f"# Kernel benchmark ({report['device']})", "",
             f"Command: `{report['command']}`  ", f"torch {report['torch']}, triton "
             f"{report['triton']}, measured copy bandwidth {report['copy_gbps']:.0f} GB/s "
             f"(read + write of a large tensor). Times: {report['timer']}; GB/s counts the bytes "
             "each kernel must move, % copy BW compares that with the copy.", "",
             "| kernel | case | Triton us | torch us | speedup | GB/s | % copy BW | TFLOP/s "
             "| Triton / torch us launched | max err (bound) | check |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["kernels"]:
        tflops = f"{r['tflops']:.1f}" if r["tflops"] else ""
        lines.append(f"| {r['kernel']} | {r['case']} | {r['triton_us']:.1f} | {r['torch_us']:.1f} "
                     f"| {r['speedup']:.1f}x | {r['gbps']:.0f} | {r['pct_copy']:.0f}% | {tflops} "
                     f"| {r['triton_launched_us']:.1f} / {r['torch_launched_us']:.1f} "
                     f"| {r['max_err']:.2g} ({r['bound']:.2g}) | {'ok' if r['ok'] else 'FAIL'} |")
    engine = report["engine"]
    lines += ["", "## Engine", "", f"`{engine['command']}`: {engine['status']}", ""]
    if "result" in engine:
        lines += ["```json", json.dumps(engine["result"], indent=2)[:20000], "```"]
    elif "output_tail" in engine:
        lines += ["```", engine["output_tail"], "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.kernels.bench",
                                     description="Check and time kernels/ on a GPU.")
    parser.add_argument("--out", type=Path, required=True,
                        help="directory for kernels.json, kernels.md and engine.json")
    parser.add_argument("--dry-run", action="store_true",
                        help="run everything on CPU under the Triton interpreter with tiny shapes")
    parser.add_argument("--skip-engine", action="store_true", help="do not run the engine bench")
    parser.add_argument("--engine-timeout-s", type=float, default=300.0,
                        help="limit for `diffvoice bench engine` (seconds)")
    args = parser.parse_args(argv)
    if args.dry_run:
        os.environ["TRITON_INTERPRET"] = "1"  # before kernels/ imports triton
        device, sizes = "cpu", DRY
    elif torch.cuda.is_available():
        device, sizes = "cuda", FULL
    else:
        print("kernels.bench: no CUDA device here; this script measures GPU kernels. "
              "Use --dry-run for a CPU smoke run under the Triton interpreter.", file=sys.stderr)
        return 2
    import triton

    from diffvoice.kernels._triton import can_interpret

    if device == "cpu" and not can_interpret():
        print("kernels.bench: --dry-run needs triton imported after TRITON_INTERPRET=1",
              file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    started = time.perf_counter()
    copy_gbps = copy_bandwidth_gbps(sizes, device)
    print(f"copy bandwidth: {copy_gbps:.0f} GB/s", flush=True)
    kernels = run_kernel_benches(sizes, device, copy_gbps)
    kernel_s = time.perf_counter() - started
    engine = {"status": "skipped (--skip-engine)", "command": ""} if args.skip_engine else \
        run_engine_bench(args.out, args.engine_timeout_s, dry_run=args.dry_run)
    print(f"engine bench: {engine['status']}", flush=True)
    report = dict(
        command="python -m diffvoice.kernels.bench "
        + " ".join(sys.argv[1:] if argv is None else argv),
        device=torch.cuda.get_device_name() if device == "cuda" else "cpu (Triton interpreter)",
        torch=torch.__version__, triton=triton.__version__, dry_run=args.dry_run,
        timer="median of triton.testing.do_bench_cudagraph (calls replayed from a CUDA graph; "
        "'launched' columns: median of do_bench, each call launched from Python, L2 flushed)"
        if device == "cuda" else "median of 3 wall-clock runs (interpreter: not a speed number)",
        copy_gbps=copy_gbps, kernel_bench_s=round(kernel_s, 1), kernels=kernels, engine=engine)
    (args.out / "kernels.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "kernels.md").write_text(markdown(report))
    print(f"wrote {args.out / 'kernels.json'} and {args.out / 'kernels.md'} "
          f"({time.perf_counter() - started:.0f} s)")
    return 0 if all(r["ok"] for r in kernels) else 1


if __name__ == "__main__":
    sys.exit(main())
