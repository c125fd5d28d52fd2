"""How many replicas fit on one GPU: the engine's memory, counted, not guessed.

    engine_tensor_bytes(engine) -> {"weights", "kv_pool", "canvas", "total"}   # a live engine
    planned_bytes(model_config, max_running, max_seq_len, dtype) -> same dict  # no allocation
    replicas_per_gpu(gpu_bytes, per_replica_bytes, reserve_bytes) -> int

`engine_tensor_bytes` adds up every tensor a live Engine holds: the model's parameters, buffers
and fused projection weights (deduplicated by storage), the per-slot KV pool and the token
canvas. `planned_bytes` builds the same model on PyTorch's meta device (shapes, no memory) and
the same pool shapes as engine.runner.ModelRunner, so it gives the identical number for a model
too big to instantiate here; tests check the two agree on a real engine.

Not counted (they live outside the engine's tensors and are added as a reserve in the table of
docs/scaling.md): the CUDA context, the allocator's cache, activations of one pass, CUDA-graph
pools, and ASR/TTS models.

    python -m diffvoice.voice.scale.sizing                 # docs/scaling.md table (meta, instant)
    python -m diffvoice.voice.scale.sizing --measure-1p5b  # also the 1.5B shape in bf16 on CPU
"""

from __future__ import annotations

import argparse
import json

import torch

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.model import DiffusionLM

GiB = 1024**3

# shapes of the open checkpoints (config.json of each; see /work/shared/reference notes)
SHAPES: dict[str, dict] = {
    "Fast_dLLM_v2_1.5B (Qwen2.5-1.5B)": dict(
        family="fast_dllm_v2", vocab_size=151936, hidden_size=1536, num_layers=28, num_heads=12,
        num_kv_heads=2, head_dim=128, intermediate_size=8960, block_size=32,
        tie_word_embeddings=True),
    "SDAR-1.7B-Chat (Qwen3-1.7B)": dict(
        family="sdar", vocab_size=151936, hidden_size=2048, num_layers=28, num_heads=16,
        num_kv_heads=8, head_dim=128, intermediate_size=6144, block_size=4,
        tie_word_embeddings=True),
    "SDAR-4B-Chat": dict(
        family="sdar", vocab_size=151936, hidden_size=2560, num_layers=36, num_heads=32,
        num_kv_heads=8, head_dim=128, intermediate_size=9728, block_size=4),
    "Fast_dLLM_v2_7B / Dream-7B (Qwen2.5-7B)": dict(
        family="fast_dllm_v2", vocab_size=152064, hidden_size=3584, num_layers=28, num_heads=28,
        num_kv_heads=4, head_dim=128, intermediate_size=18944, block_size=32),
    "LLaDA-8B-Instruct": dict(
        family="llada", vocab_size=126464, hidden_size=4096, num_layers=32, num_heads=32,
        num_kv_heads=32, head_dim=128, intermediate_size=12288),
}  # fmt: skip


# fused tensors whose storage the separate q/k/v and gate/up weights become views of
# (DiffusionLM.fuse_projections): on the meta device views cannot be told from copies, so these
# are skipped there and the separate weights counted instead (same bytes); any other tensor
# attribute (e.g. the fused q/k-norm weights, a copy) is counted
_VIEW_BACKED = frozenset({"fused_qkv", "fused_qkv_bias", "fused_gate_up"})


def _module_tensor_bytes(model: torch.nn.Module, skip: frozenset = frozenset()) -> int:
    seen: set[tuple] = set()
    total = 0

    def add(t: torch.Tensor) -> None:
        nonlocal total
        key = (t.untyped_storage().data_ptr(), t.device.type) if t.device.type != "meta" \
            else ("meta", id(t))
        if key in seen:
            return
        seen.add(key)
        total += t.untyped_storage().nbytes() if t.device.type != "meta" \
            else t.numel() * t.element_size()

    for t in [*model.parameters(), *model.buffers()]:
        add(t)
    for module in model.modules():  # fused projections are plain tensor attributes
        for name, value in vars(module).items():
            if isinstance(value, torch.Tensor) and name not in skip:
                add(value)
    return total


def _pool_bytes(mc: ModelConfig, slots: int, max_seq_len: int, dtype: torch.dtype) -> tuple:
    # engine.runner.ModelRunner: per layer K and V of [slots, kv_heads, T + 1, head_dim];
    # the canvas is [slots, T + 1] int64
    elem = torch.empty((), dtype=dtype).element_size()
    kv = mc.num_layers * 2 * slots * mc.num_kv_heads * (max_seq_len + 1) * mc.head_dim * elem
    canvas = slots * (max_seq_len + 1) * 8
    return kv, canvas


def engine_tensor_bytes(engine) -> dict[str, int]:
    runner = engine.runner
    weights = _module_tensor_bytes(engine.loaded.model)
    kv = sum(k.untyped_storage().nbytes() + v.untyped_storage().nbytes() for k, v in runner.kv)
    canvas = runner.seq.untyped_storage().nbytes()
    return {"weights": weights, "kv_pool": kv, "canvas": canvas, "total": weights + kv + canvas}


def planned_bytes(mc: ModelConfig, max_running: int, max_seq_len: int,
                  dtype: torch.dtype) -> dict[str, int]:
    with torch.device("meta"):
        model = DiffusionLM(mc).to(dtype)
    model.fuse_projections()  # what Engine.__init__ does
    weights = _module_tensor_bytes(model, skip=_VIEW_BACKED)
    kv, canvas = _pool_bytes(mc, max_running, max_seq_len, dtype)
    return {"weights": weights, "kv_pool": kv, "canvas": canvas, "total": weights + kv + canvas}


def replicas_per_gpu(gpu_bytes: int, per_replica_bytes: int, reserve_bytes: int) -> int:
    """Whole replicas that fit: each needs its engine tensors plus a fixed reserve."""
    return max(0, int(gpu_bytes // (per_replica_bytes + reserve_bytes)))


def _config(dims: dict) -> ModelConfig:
    return ModelConfig(mask_token_id=0, eos_token_ids=(1,), max_position_embeddings=8192,
                       **dims)


def table(gpu_gib: float = 141.0, reserve_gib: float = 3.0, max_running: int = 16,
          max_seq_len: int = 4096) -> list[dict]:
    rows = []
    for name, dims in SHAPES.items():
        b = planned_bytes(_config(dims), max_running, max_seq_len, torch.bfloat16)
        rows.append({
            "model": name, "weights_gib": round(b["weights"] / GiB, 2),
            "kv_pool_gib": round(b["kv_pool"] / GiB, 2), "total_gib": round(b["total"] / GiB, 2),
            "replicas_per_h200": replicas_per_gpu(int(gpu_gib * GiB), b["total"],
                                                  int(reserve_gib * GiB)),
        })  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m diffvoice.voice.scale.sizing",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu-gib", type=float, default=141.0, help="GPU memory (H200: 141)")
    parser.add_argument("--reserve-gib", type=float, default=3.0,
                        help="per replica: CUDA context, allocator cache, activations, graphs")
    parser.add_argument("--max-running", type=int, default=16, help="EngineConfig.max_running")
    parser.add_argument("--max-seq-len", type=int, default=4096, help="EngineConfig.max_seq_len")
    parser.add_argument("--measure-1p5b", action="store_true",
                        help="build the 1.5B shape in bf16 on CPU and compare with the plan")
    args = parser.parse_args(argv)
    out = {"table": table(args.gpu_gib, args.reserve_gib, args.max_running, args.max_seq_len)}
    if args.measure_1p5b:
        out["measured_1p5b_cpu_bf16"] = _measure_1p5b(args.max_running, args.max_seq_len)
    print(json.dumps(out, indent=1))
    return 0


def _measure_1p5b(max_running: int, max_seq_len: int) -> dict:
    import resource
    import tempfile
    from pathlib import Path

    from diffvoice.engine import Engine, EngineConfig
    from diffvoice.engine.loader import LoadedModel
    from diffvoice.engine.testing import make_tokenizer
    from diffvoice.engine.tokenizer import ChatTokenizer

    dims = SHAPES["Fast_dLLM_v2_1.5B (Qwen2.5-1.5B)"]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with tempfile.TemporaryDirectory() as tmp:
        make_tokenizer(Path(tmp))
        mc = _config(dims)
        model = DiffusionLM(mc)
        model.to(torch.bfloat16).eval().requires_grad_(False)
        loaded = LoadedModel(model, ChatTokenizer.from_dir(Path(tmp)), mc, Path(tmp), "1.5b")
        engine = Engine(loaded, EngineConfig(device="cpu", max_running=max_running,
                                             max_seq_len=max_seq_len))
        try:
            measured = engine_tensor_bytes(engine)
        finally:
            engine.close()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    planned = planned_bytes(mc, max_running, max_seq_len, torch.bfloat16)
    return {"measured_tensor_bytes": measured, "planned_bytes": planned,
            "peak_rss_growth_bytes": rss1 - rss0}


if __name__ == "__main__":
    raise SystemExit(main())
