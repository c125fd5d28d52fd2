"""The engine worker's own work per pass, beside the model's forward (`diffvoice bench engine`).

    host_profile(engine, chats, params, concurrency) -> {
        "host_reads_per_block":  tensor values the host consumed (engine.profiling.HostReads:
                                 .tolist(), .item(), bool(t), ...) per *block round*: a worker
                                 step in which at least one row committed a decode block (at
                                 batch 16 the rows commit their blocks together, so one read
                                 serves them all),
        "plan_builds_per_pass":  pass plans built (engine.pass_plan.PlanCache.built: a shape
                                 not seen before) per pass,
        "plan_binds_per_pass":   plans of a known shape re-anchored in place to new positions
                                 (PlanCache.bound) per pass,
        "host_us_per_pass":      the worker's busy time (its block steps, their accounting and
                                 delivery, scheduling, admission) less the model's forward,
                                 per pass, in a second run with no counting mode (the modes
                                 slow what they watch),
        "passes", "block_rounds", "idle_row_passes",
        "late_row_passes":       passes run by rows whose answer had ended (at an EOS) in the
                                 block step before, which overlap queued before reading it,
        "overlapped_steps":      block steps queued before the previous one was read,
        "reads_by_kind"}
    aten_ops_per_layer_pass(dims, params, kernels="torch") -> aten operators dispatched per
        pass by one decoder layer: the ops per pass of a 2-layer copy of a model shape less
        those of a 1-layer copy (engine.profiling.AtenOps), batch 1; kernels="triton" counts
        the GPU's decode path (each Triton launch one operator); device_ops_per_layer_pass:
        those that do device work (a kernel each on a GPU), without views and allocations.

Counted on the engine's worker thread by wrapping its methods on the instances; nothing in the
engine is changed. Knows nothing about voice.
"""

from __future__ import annotations

import asyncio
import os
import time
from contextlib import contextmanager

import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import LoadedModel
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.profiling import AtenOps, HostReads
from diffvoice.kernels._triton import HAS_TRITON, can_interpret
from diffvoice.kernels.dispatch import ENV_VAR


async def _drive(engine: Engine, chats, params: SamplingParams, concurrency: int) -> int:
    sem = asyncio.Semaphore(concurrency)

    async def one(messages):
        async with sem:
            n = 0
            async for d in engine.generate(messages, params):
                n += len(d.token_ids)
            return n

    return sum(await asyncio.gather(*(one(m) for m in chats)))


def _wrap(obj, name: str, around) -> None:
    """obj.name = around(original) on the instance."""
    setattr(obj, name, around(getattr(obj, name)))


def _unwrap(obj, *names: str) -> None:
    for name in names:
        obj.__dict__.pop(name, None)


def _counted(mode, total):
    """around(fn): fn run inside a fresh `mode()` (on the calling thread), its counts added to
    `total` (modes are thread-local, so this is entered on the engine's worker thread)."""
    def around(fn):
        def run(*args, **kwargs):
            with mode() as counts:
                out = fn(*args, **kwargs)
            total.by_name.update(counts.by_name)
            if isinstance(total, AtenOps):
                total.metadata += counts.metadata
            return out
        return run
    return around


def _count_run(engine: Engine, chats, params, concurrency: int) -> dict:
    reads, rounds = HostReads(), [0]

    def rounded(update):
        def run(rows, out, ahead=None):
            events = update(rows, out, ahead)
            rounds[0] += bool(events)
            return events
        return run

    _wrap(engine.runner, "step", _counted(HostReads, reads))
    _wrap(engine.runner, "collect", _counted(HostReads, reads))  # a started read, taken
    _wrap(engine.scheduler, "update", rounded)
    plans = engine.runner.plans
    passes0, built0, bound0 = engine.total_passes, plans.built, plans.bound
    idle0, late0, over0 = engine.idle_row_passes, engine.late_row_passes, engine.overlapped_steps
    try:
        asyncio.run(_drive(engine, chats, params, concurrency))
    finally:
        _unwrap(engine.runner, "step", "collect")
        _unwrap(engine.scheduler, "update")
    passes = engine.total_passes - passes0
    return {"host_reads_per_block": reads.count / max(rounds[0], 1),
            "plan_builds_per_pass": (plans.built - built0) / max(passes, 1),
            "plan_binds_per_pass": (plans.bound - bound0) / max(passes, 1),
            "passes": passes, "block_rounds": rounds[0],
            "idle_row_passes": engine.idle_row_passes - idle0,
            "late_row_passes": engine.late_row_passes - late0,
            "overlapped_steps": engine.overlapped_steps - over0,
            "reads_by_kind": dict(reads.by_name)}


def _time_run(engine: Engine, chats, params, concurrency: int) -> dict:
    busy, forward = [0.0], [0.0]

    def timed(total):
        def around(fn):
            def run(*args, **kwargs):
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    total[0] += time.perf_counter() - t0
            return run
        return around

    worker = ("_launch", "_resolve", "_admit_each")
    for name in worker:
        _wrap(engine, name, timed(busy))
    _wrap(engine.scheduler, "schedule", timed(busy))
    model = engine.runner.model
    _wrap(model, "forward_step", timed(forward))
    passes0 = engine.total_passes
    try:
        asyncio.run(_drive(engine, chats, params, concurrency))
    finally:
        _unwrap(engine, *worker)
        _unwrap(engine.scheduler, "schedule")
        _unwrap(model, "forward_step")
    passes = max(engine.total_passes - passes0, 1)
    return {"host_us_per_pass": (busy[0] - forward[0]) / passes * 1e6,
            "forward_us_per_pass": forward[0] / passes * 1e6, "timed_passes": passes}


def host_profile(engine: Engine, chats, params: SamplingParams, concurrency: int) -> dict:
    """Counts, then times, `chats` run `concurrency` at a time (warm the engine first)."""
    if engine.runner.static is not None:
        raise ValueError("host_profile times the eager forward; run it with enforce_eager")
    return {**_count_run(engine, chats, params, concurrency),
            **_time_run(engine, chats, params, concurrency), "concurrency": concurrency}


def _ops_per_pass(loaded: LoadedModel, messages, params: SamplingParams, config) -> float:
    engine = Engine(loaded, config)
    try:
        asyncio.run(_drive(engine, [messages], params, 1))  # warm: plans, lazy tables
        ops = AtenOps()
        _wrap(engine.runner, "step", _counted(AtenOps, ops))
        passes0 = engine.total_passes
        asyncio.run(_drive(engine, [messages], params, 1))
        passes = max(engine.total_passes - passes0, 1)
        return ops.count / passes, ops.launches / passes
    finally:
        engine.close()


def aten_ops_per_layer_pass(dims: dict, tokenizer, mask_id: int, eos_id: int,
                            params: SamplingParams, config: EngineConfig | None = None,
                            seed: int = 0, kernels: str = "torch") -> dict:
    """Aten ops per pass of one decoder layer of the shape `dims` (family and sizes, as
    engine_workload.PRESETS), from 1- and 2-layer copies on the CPU, batch 1. `kernels`: the
    backend ($DIFFVOICE_KERNELS for the run): "torch", what a CPU runs, or "triton", the
    decode path a GPU runs (fused kernels; here under Triton's interpreter, slow), where each
    kernel launch counts as one operator."""
    if kernels == "triton" and not (HAS_TRITON and can_interpret()):
        raise RuntimeError("counting the Triton path on a CPU needs triton and its interpreter "
                           "(TRITON_INTERPRET=1 before triton is imported)")
    with _kernels(kernels):
        return _aten_ops_per_layer_pass(dims, tokenizer, mask_id, eos_id, params, config, seed)


@contextmanager
def _kernels(backend: str):
    saved = os.environ.get(ENV_VAR)
    os.environ[ENV_VAR] = backend
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = saved


def _aten_ops_per_layer_pass(dims, tokenizer, mask_id, eos_id, params, config, seed) -> dict:
    config = config or EngineConfig(device="cpu", enforce_eager=True, max_running=1)
    dims = dict(dims)
    family = dims.pop("family")
    per_pass = {}
    for layers in (1, 2):
        cfg = ModelConfig(family=family, mask_token_id=mask_id, eos_token_ids=(eos_id,),
                          max_position_embeddings=4096, **{**dims, "num_layers": layers})
        torch.manual_seed(seed)
        model = DiffusionLM(cfg)
        model.init_weights(std=0.02)
        model.eval().requires_grad_(False)
        loaded = LoadedModel(model, tokenizer, cfg, None, f"{layers}-layer")
        per_pass[layers] = _ops_per_pass(
            loaded, [{"role": "user", "content": "When are you open on Saturday?"}], params,
            config)
    return {"aten_ops_per_layer_pass": per_pass[2][0] - per_pass[1][0],
            "aten_ops_per_pass_1_layer": per_pass[1][0],
            "aten_ops_per_pass_2_layers": per_pass[2][0],
            "device_ops_per_layer_pass": per_pass[2][1] - per_pass[1][1]}
