"""Engine: one per process, many concurrent callers, one batched denoising pass at a time.

    engine = Engine.from_pretrained(path, EngineConfig())
    async for delta in engine.generate(messages, SamplingParams(max_new_tokens=48)):
        ...
A worker thread owns the model (engine.worker, the half of Engine that runs on it): each loop it
takes new requests and aborts, asks the scheduler for the rows, runs a block step (ModelRunner)
and hands committed text to each caller's asyncio queue. This module is the callers' half.
Cancelling the caller's task, or `abort(request_id)`, frees the slot before the next pass. One
request's failure never disturbs the others: bad params are rejected before they are queued
(schemas bounded and compiled off the worker thread, engine.constrained.limits); a row whose own
schema work raises inside a pass is failed alone (engine.constrained.hook); and should a batched
pass still raise, each of its rows is re-run alone and only a row that fails alone fails.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import torch

from diffvoice.engine.block_step import BlockStepPlanner
from diffvoice.engine.constrained.limits import Budget
from diffvoice.engine.decoding import resolve
from diffvoice.engine.loader import LoadedModel, load_checkpoint
from diffvoice.engine.params import EngineConfig, SamplingParams
from diffvoice.engine.requests import needs_compile, prepare_sequence, prompt_chars
from diffvoice.engine.runner import ModelRunner
from diffvoice.engine.scheduler import DraftRefused, EngineOverloaded, Scheduler
from diffvoice.engine.sequence import Sequence
from diffvoice.engine.tokenizer import Detokenizer
from diffvoice.engine.worker import Delta, Worker, _Caller, _Pending

log = logging.getLogger("diffvoice.engine")


# prompts up to this many characters are templated and tokenised on the worker thread (well under
# a millisecond); longer ones on a thread of their own so no pass waits for them
PREPARE_ON_WORKER_CHARS = 4096
# threads that prepare long prompts and compile schemas (tools / response_format), off the
# worker thread: a bound on how much host work concurrent requests can pile up at once
PREPARE_THREADS = 4
# threads of their own for priority-0 requests (live calls): a flood of priority > 0 requests
# with heavy schemas queues on the shared pool, never in front of them
PRIORITY_PREPARE_THREADS = 2


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


class Engine(Worker):
    def __init__(self, loaded: LoadedModel, config: EngineConfig | None = None):
        self.config = config or EngineConfig()
        self.loaded = loaded
        self.tokenizer = loaded.tokenizer
        self.model_config = loaded.config
        self.model_name = loaded.name
        self.device = next(loaded.model.parameters()).device
        loaded.model.fuse_projections()
        mc = loaded.config
        self.max_seq_len = self.config.max_seq_len or min(mc.max_position_embeddings, 4096)
        self.runner = ModelRunner(loaded, self.config, self.device, self.max_seq_len)
        self.scheduler = Scheduler(self.config.max_running, self.config.max_queued,
                                   mc.eos_token_ids, self.config.max_drafts,
                                   self.config.drafts_share_passes, self.config.reserved_slots,
                                   self.config.priority_share_passes)
        self._callers: dict[str, _Caller] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._aborts: list[str] = []
        self._pending: list[_Pending] = []  # short requests the worker prepares itself
        self._closed = False
        self._ids = itertools.count()
        self._prepare_pool = concurrent.futures.ThreadPoolExecutor(
            PREPARE_THREADS, thread_name_prefix="diffvoice-prepare")
        self._priority_prepare_pool = concurrent.futures.ThreadPoolExecutor(
            PRIORITY_PREPARE_THREADS, thread_name_prefix="diffvoice-prepare-p0")
        self.total_passes = 0
        self.block_steps = BlockStepPlanner(self.config.block_step_passes)
        self.idle_row_passes = 0  # passes rows sat out in block steps (their block was done)
        overlap = self.config.overlap
        self.overlap = self.device.type == "cuda" if overlap is None else overlap
        self.overlapped_steps = 0  # block steps queued before the previous one was read
        self.late_row_passes = 0  # passes run by rows whose answer had ended a step before
        self.isolated_passes = 0  # batched passes that failed and were re-run row by row
        # the longest any one request's preparation held the worker thread (seconds): only
        # short, unconstrained prompts are prepared there (see generate)
        self.worker_prepare_max_s = 0.0
        self.last_batch_size = 0
        self._thread = threading.Thread(target=self._loop, name="diffvoice-engine", daemon=True)
        self._thread.start()

    @classmethod
    def from_pretrained(cls, path: str | Path, config: EngineConfig | None = None) -> Engine:
        config = config or EngineConfig()
        device = pick_device(config.device)
        loaded = load_checkpoint(path, dtype=config.dtype, device=str(device))
        return cls(loaded, config)

    @property
    def default_decoding(self) -> str:
        """What SamplingParams(decoding=None) decodes with on this model (engine.loader)."""
        return self.loaded.default_decoding

    def careful_params(self, params: SamplingParams) -> SamplingParams:
        """`params` decoded one token per pass (engine.decoding.careful): the clarify guard's
        retry of a blended reply."""
        from diffvoice.engine.decoding import careful

        return careful(params, self.loaded.config)

    # ------------------------------------------------------------------ caller side
    def prepare(self, messages: list[dict] | str, params: SamplingParams,
                request_id: str | None = None,
                chat_template_kwargs: dict | None = None, budget: Budget | None = None
                ) -> Sequence:
        """Validate and tokenize a request (raises ValueError naming the problem).
        `chat_template_kwargs` become chat-template variables (tools=[...], enable_thinking=...),
        as in transformers' apply_chat_template and vLLM's request field of that name.
        `budget` (constrained.limits.Budget) bounds a schema compile's time and lets a caller
        that went away stop it."""
        return prepare_sequence(self, messages, params, request_id or self._new_id(),
                                chat_template_kwargs, budget)

    async def generate(self, messages: list[dict] | str, params: SamplingParams | None = None,
                       request_id: str | None = None,
                       chat_template_kwargs: dict | None = None, *,
                       draft: bool | Callable[[], bool] = False,
                       priority: int = 0, client: str | None = None) -> AsyncIterator[Delta]:
        """Stream the answer. `draft=True`: low priority (engine.scheduler), may end early with
        finish_reason "shed"; more than max_drafts in flight raises DraftRefused. A callable
        `draft` is asked once, when the request is handed to the worker (after its preparation):
        a caller that has meanwhile decided it wants the answer says False (see promote).
        `priority` (an int >= 0, lower first; 0 the best): a request of priority > 0 leaves
        EngineConfig.reserved_slots to priority 0, pauses while better rows decode (unless
        priority_share_passes) and is prepared on the shared pool, priority 0 on its own.
        `client` (any string: an API key's digest, an address) is whose request it is: clients
        of priority > 0 get fair shares of the engine's places (engine.scheduler)."""
        if not isinstance(priority, int) or isinstance(priority, bool) or priority < 0:
            raise ValueError(f"priority must be an integer >= 0, got {priority!r}")
        params = params or self.config.default_params
        loop = asyncio.get_running_loop()
        caller = _Caller(loop, asyncio.Queue(), Detokenizer(self.tokenizer), params.stop)
        rid = request_id or self._new_id()
        seq = None
        if prompt_chars(messages) > PREPARE_ON_WORKER_CHARS or needs_compile(params) \
                or chat_template_kwargs:
            # templating + tokenising a long prompt, or compiling a request's schemas, takes
            # time that grows with what the request brings: never on the caller's event loop,
            # nor on the worker (it would hold up every running request's next pass), but on the
            # bounded prepare pool, under the config's prepare_budget_s. A caller cancelled
            # meanwhile has queued nothing, and its compile stops at its next budget check.
            cancelled = threading.Event()
            budget = Budget(self.config.prepare_budget_s, cancelled)
            try:
                pool = self._prepare_pool if priority or draft is True \
                    else self._priority_prepare_pool
                seq = await loop.run_in_executor(
                    pool, self._prepare_budgeted, messages, params, rid,
                    chat_template_kwargs, budget)
            except asyncio.CancelledError:
                cancelled.set()
                raise
        # a short prompt is templated and tokenised by the worker thread itself, before its next
        # pass: no thread hand-off per request. Errors (a bad request, EngineOverloaded) come
        # back through the queue and are raised at the first iteration.
        with self._lock:
            if self._closed:
                raise RuntimeError("engine is closed")
            is_draft = bool(draft()) if callable(draft) else draft
            self._pending.append(_Pending(rid, messages, params, chat_template_kwargs, is_draft,
                                          caller, seq, priority, client))
            self._wake.notify()
        finished = False
        try:
            while not finished:
                delta = await caller.queue.get()
                if isinstance(delta, BaseException):
                    raise delta
                finished = delta.finished
                yield delta
        finally:
            if not finished:
                self.abort(rid)

    def _prepare_budgeted(self, messages, params, rid, chat_template_kwargs, budget: Budget):
        budget.start()  # the budget counts this request's own work, not its wait in the pool
        budget.check()  # a caller that left while queued costs nothing
        return self.prepare(messages, params, rid, chat_template_kwargs, budget)

    def _new_id(self) -> str:
        return f"req-{next(self._ids)}-{uuid.uuid4().hex[:8]}"

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.append(request_id)
            self._wake.notify()

    def promote(self, request_id: str) -> bool:
        """A draft becomes a real request (its caller now waits for it); False if it is gone
        (or not handed to the worker yet: a callable `draft` of generate() covers that)."""
        with self._lock:
            for pending in self._pending:  # handed over, not yet taken in by the worker
                if pending.request_id == request_id:
                    pending.draft = False
                    return True
            return self.scheduler.promote(request_id)

    def active_request_ids(self) -> set[str]:
        with self._lock:
            return set(self.scheduler.by_id)

    def stats(self) -> dict:
        with self._lock:
            return {"running": len(self.scheduler.running), "queued": len(self.scheduler.waiting),
                    "callers": len(self._callers), "generators": len(self.runner.generators),
                    "free_slots": len(self.scheduler.free_slots),
                    "last_batch_size": self.last_batch_size, "passes": self.total_passes,
                    "reused_prefix_tokens": self.scheduler.reused_tokens,
                    "drafts": self.scheduler.drafts_in_flight(),
                    "drafts_shed": self.scheduler.shed_total,
                    "isolated_passes": self.isolated_passes,
                    "overlapped_steps": self.overlapped_steps,
                    "late_row_passes": self.late_row_passes,
                    "worker_prepare_max_ms": round(self.worker_prepare_max_s * 1e3, 3),
                    "max_running": self.config.max_running, "device": str(self.device),
                    "model": self.model_name}

    def warmup(self) -> None:
        """Before serving: the decode passes' CUDA graphs for the usual shapes
        (EngineConfig.warmup_graph_context), then one short generation, so the first callers do
        not pay for captures or lazy initialisation."""
        params, _ = resolve(self.config.default_params, self.loaded.config)
        with self._lock:  # no pass runs meanwhile (capture needs the device to itself)
            t0 = time.perf_counter()
            new = self.runner.prepare_graphs(params.block_size, self.config.warmup_graph_context)
        if new:
            log.info("prepared %d decode shapes%s in %.1f s", len(new),
                     " (CUDA graphs)" if self.runner.static.capture else "",
                     time.perf_counter() - t0)

        async def run():
            async for _ in self.generate([{"role": "user", "content": "hello"}],
                                         SamplingParams(max_new_tokens=8, ignore_eos=True)):
                pass
        asyncio.run(run())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=10)
        self._prepare_pool.shutdown(wait=False, cancel_futures=True)
        self._priority_prepare_pool.shutdown(wait=False, cancel_futures=True)

__all__ = ["Engine", "Delta", "DraftRefused", "EngineOverloaded"]
