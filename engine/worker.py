"""The engine's worker thread: the half of Engine that runs on it (engine.engine holds the
callers' half: generate, abort, promote, stats).

Each loop the worker takes new requests and aborts, asks the scheduler for the rows, queues a
block step on the device (ModelRunner), reads it (after queuing the next one, with overlap) and
hands committed text to each caller's asyncio queue (`Delta`). A batched step that raises is
re-run row by row so only a row that fails alone fails (`_isolate`). `Worker` is a mixin of
Engine: it uses the state Engine.__init__ sets (scheduler, runner, callers, lock, config).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass, field

import torch

from diffvoice.engine.params import SamplingParams
from diffvoice.engine.scheduler import Committed, PriorityRefused, rank
from diffvoice.engine.sequence import Sequence
from diffvoice.engine.tokenizer import Detokenizer

log = logging.getLogger("diffvoice.engine")


@dataclass
class Delta:
    request_id: str
    text: str
    token_ids: list[int]
    finished: bool = False
    finish_reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    first_block_latency_s: float | None = None  # submit -> first committed block
    elapsed_s: float = 0.0  # submit -> this delta
    queue_s: float | None = None  # submit -> admitted to a slot (time spent queued)
    tool_call: dict | None = None  # {"name", "arguments": JSON text} on a call's final delta
    passes: int = 0  # denoising passes this request has taken so far
    # lowest confidence (softmax probability) of any token committed in the first block, once
    # that block is done: the engine's own measure of how sure the reply's start was
    first_block_confidence: float | None = None


@dataclass
class _Caller:
    loop: asyncio.AbstractEventLoop
    queue: asyncio.Queue
    detok: Detokenizer
    stop: tuple[str, ...]
    text: str = ""
    sent: int = 0  # characters of `text` already delivered (stop strings may hold some back)
    events: list = field(default_factory=list)


@dataclass
class _Pending:
    """A request generate() handed to the worker thread: to prepare, or prepared (`seq`)."""

    request_id: str
    messages: list[dict] | str
    params: SamplingParams
    template_kwargs: dict | None
    draft: bool
    caller: _Caller
    seq: Sequence | None = None
    priority: int = 0
    client: str | None = None


@dataclass
class _Step:
    """A block step queued on the device (Engine._launch), its read started."""

    rows: list[Sequence]
    read: object  # runner.PendingRead
    passes: int
    ahead: list | None  # Scheduler.commit_ahead's, when the rows moved on before the read


class Worker:
    # ------------------------------------------------------------------ worker thread
    def _loop(self) -> None:
        threads = self.config.worker_threads
        if threads is None:
            threads = 1 if self.device.type == "cpu" else 0
        if threads:
            torch.set_num_threads(threads)
        flight = None  # a block step queued and not read yet (overlap), or None
        while True:
            with self._lock:
                while (not self._closed and not len(self.scheduler) and not self._aborts
                       and not self._pending and flight is None):
                    self._wake.wait()
                if self._closed:
                    for rid in list(self.scheduler.by_id):
                        self._abort_locked(rid)
                    for p in self._pending:
                        p.caller.loop.call_soon_threadsafe(
                            p.caller.queue.put_nowait, RuntimeError("engine is closed"))
                    self._pending.clear()
                    return
                if self._aborts:
                    gone = set(self._aborts)
                    self._pending = [p for p in self._pending if p.request_id not in gone]
                for rid in self._aborts:
                    self._abort_locked(rid)
                self._aborts.clear()
                pending, self._pending = self._pending, []
            if pending:
                self._queue_pending(pending)
            with self._lock:
                rows, admitted = self.scheduler.schedule()
                for seq in self.scheduler.shed:
                    self.runner.release(seq)
                    self._deliver(seq.request_id, Delta(
                        seq.request_id, "", [], True, "shed", seq.prompt_len,
                        len(seq.generated), passes=seq.passes))
            rows = self._admit_each(rows, admitted)
            if not rows:
                if flight is not None:
                    self._resolve(flight)
                    flight = None
                continue
            try:
                step = self._launch(rows)
            except Exception as exc:  # a failed pass fails its rows, never the engine
                if flight is not None:  # the step before it stands: read it first
                    self._resolve(flight)
                    flight = None
                self._isolate(rows, exc)
                continue
            if flight is not None:
                self.overlapped_steps += 1
                self._resolve(flight, later=step)
                if all(seq.finish_reason is not None for seq in step.rows):
                    # every row of it ended in the step before (EOS) or was aborted: nothing
                    # to read; its passes are counted, the read it started is dropped
                    self.total_passes += 1
                    flight = None
                    continue
            if step.ahead is not None:  # read it after the next step is queued
                flight = step
            else:
                self._resolve(step)
                flight = None

    def _isolate(self, rows: list[Sequence], exc: Exception) -> None:
        """A step of `rows` raised: fail the one row, or re-run each row alone and fail only a
        row that fails alone."""
        rows = [seq for seq in rows if seq.finish_reason is None]
        if len(rows) == 1:
            log.error("denoising pass failed for %s", rows[0].request_id, exc_info=exc)
            self._fail(rows[0], exc)
            return
        log.warning("denoising pass of %d rows failed (%r): re-running row by row",
                    len(rows), exc)
        self.isolated_passes += 1
        for seq in rows:
            try:
                one = self.runner.step([seq])
            except Exception as row_exc:
                log.exception("denoising pass failed for %s", seq.request_id)
                self._fail(seq, row_exc)
                continue
            self._after_step([seq], one)

    def _launch(self, rows: list[Sequence], overlap: bool | None = None) -> _Step:
        """Queue a block step of `rows` (engine.block_step): its passes back to back, the
        host's per-pass accounting done without reading, the one read started. With overlap,
        a step that surely finishes every row's block also moves the rows to their next blocks
        (Scheduler.commit_ahead), so the next step can be queued before this one is read."""
        n = self.block_steps.passes(rows)
        overlap = self.overlap if overlap is None else overlap
        sure = overlap and all(self.block_steps.sure_done(r, n) for r in rows)
        block = self.runner.begin_block_step(rows, n)
        best = rank(rows[0]) if len(rows) == 1 else min(rank(seq) for seq in rows)
        yields = best != (False, 0)  # nothing outranks real priority-0 rows
        ran = 1
        for _ in range(n - 1):  # rows change only on this thread (aborts are applied here)
            if yields and self._better_request_waiting(best):
                sure = False  # cut short: the blocks are not done
                break  # drafts / lower priorities yield: the next pass reads, and the better
                # request is scheduled
            self.runner.step(rows, block, read=False)
            self.scheduler.advance(rows)
            self.total_passes += 1
            ran += 1
        read = self.runner.step(rows, block, wait=False)
        ahead = None
        if sure:
            with self._lock:
                ahead = self.scheduler.commit_ahead(rows)
        return _Step(rows, read, ran, ahead)

    def _resolve(self, step: _Step, later: _Step | None = None) -> None:
        """Read a queued step and account it (`later`: the step queued after it, which a row
        that ended here ran for nothing)."""
        try:
            out = self._collect(step)
        except Exception as exc:
            if step.ahead is None:
                self._isolate(step.rows, exc)
            else:  # its rows moved on already: they cannot be re-run
                for seq in step.rows:
                    if seq.finish_reason is None:
                        self._fail(seq, exc)
            return
        self._after_step(step.rows, out, step.ahead)
        if later is not None:
            ended = {id(seq) for seq in step.rows if seq.finish_reason is not None}
            self.late_row_passes += later.passes * sum(id(s) in ended for s in later.rows)

    def _collect(self, step: _Step):
        """Wait for a queued step's read -> its StepOutput, with the block steps' bookkeeping
        (passes rows sat out, what data-dependent blocks took)."""
        out = self.runner.collect(step.read)
        self.idle_row_passes += sum(out.idle)
        self.block_steps.observe(step.rows, out)
        return out

    def step_rows(self, rows: list[Sequence]):
        """A block step of `rows`, read at once -> the last pass's StepOutput (for
        `scheduler.update`; no overlap)."""
        return self._collect(self._launch(rows, overlap=False))

    def _better_request_waiting(self, than: tuple[bool, int]) -> bool:
        """A host-side look (no lock, no device read) for a request that outranks `than`
        (engine.scheduler.rank) and could run now: handed over, or waiting for a slot."""
        return (any((p.draft, p.priority) < than for p in list(self._pending))
                or self.scheduler.better_waiting(than))

    def _fail(self, seq: Sequence, exc: BaseException) -> None:
        with self._lock:
            self.scheduler.stop(seq, "error")
            self.runner.release(seq)
            self._deliver(seq.request_id, exc)

    def _after_step(self, rows: list[Sequence], out, ahead: list | None = None) -> None:
        """Account one finished pass: fail the rows whose own work raised (out.failed), commit
        and deliver the others' tokens (`ahead`: Scheduler.commit_ahead's, for an overlapped
        step)."""
        for i, exc in out.failed.items():
            log.warning("request %s failed in its pass: %r", rows[i].request_id, exc)
            self._fail(rows[i], exc)
        for seq, low in zip(rows, out.min_conf or (), strict=False):
            if seq.t_first_block is None:
                seq.first_block_conf = min(seq.first_block_conf, low)
        with self._lock:
            self.total_passes += 1
            self.last_batch_size = len(rows)
            events = self.scheduler.update(rows, out, ahead)  # skips failed (stopped) rows
            for ev in events:
                try:
                    self._emit(ev)
                except Exception as exc:  # e.g. detokenisation: fail this request only
                    log.exception("delivering %s failed", ev.seq.request_id)
                    self.scheduler.stop(ev.seq, "error")
                    self._deliver(ev.seq.request_id, exc)
            for seq in rows:
                if seq.finish_reason is not None:
                    self.runner.release(seq)

    def _queue_pending(self, pending: list[_Pending]) -> None:
        """Prepare (off the lock) the requests generate() left to this thread and queue them; a
        request that cannot be prepared or queued gets its error through its queue."""
        ready = []
        for p in pending:
            t0 = time.perf_counter()
            try:
                seq = p.seq or self.prepare(p.messages, p.params, p.request_id,
                                            p.template_kwargs)
            except Exception as exc:  # a bad request: its caller raises it, nobody else sees it
                p.caller.loop.call_soon_threadsafe(p.caller.queue.put_nowait, exc)
                continue
            finally:
                if p.seq is None:
                    self.worker_prepare_max_s = max(self.worker_prepare_max_s,
                                                    time.perf_counter() - t0)
            seq.draft, seq.priority, seq.client = p.draft, p.priority, p.client
            ready.append((p, seq))
        with self._lock:
            for p, seq in ready:
                if p.request_id in self._aborts:  # the caller left while it was prepared
                    continue
                try:
                    self.scheduler.add(seq)  # may raise EngineOverloaded / DraftRefused
                except Exception as exc:
                    p.caller.loop.call_soon_threadsafe(p.caller.queue.put_nowait, exc)
                    continue
                self._callers[seq.request_id] = p.caller
                for victim in self.scheduler.evicted:  # its client held the most places
                    self._deliver(victim.request_id, PriorityRefused(
                        f"engine is full for priority {victim.priority}: this client's "
                        "request made room for another client's (fair shares)"))
                self.scheduler.evicted.clear()

    def _admit_each(self, rows: list[Sequence], admitted: list[Sequence]) -> list[Sequence]:
        """Lay out each newly admitted request on its own: one that fails to admit (a bad seed,
        a canvas that does not fit) fails alone and leaves the pass; the others go on."""
        failed = []
        for seq in admitted:
            try:
                self.runner.admit(seq)
            except Exception as exc:
                log.warning("admitting %s failed: %r", seq.request_id, exc)
                failed.append((seq, exc))
        if not failed:
            return rows
        with self._lock:
            for seq, exc in failed:
                self.runner.release(seq)
                self.scheduler.stop(seq, "error")
                self._deliver(seq.request_id, ValueError(f"request refused at admission: {exc}"))
        bad = {id(seq) for seq, _ in failed}
        return [seq for seq in rows if id(seq) not in bad]

    def _abort_locked(self, request_id: str) -> None:
        seq = self.scheduler.abort(request_id)
        if seq is not None:
            self.runner.release(seq)
            self._deliver(request_id, Delta(request_id, "", [], True, "abort", seq.prompt_len,
                                            len(seq.generated), passes=seq.passes))

    def _emit(self, ev: Committed) -> None:
        seq = ev.seq
        caller = self._callers.get(seq.request_id)
        if caller is None:
            return
        if seq.constraint is not None and seq.constraint.structured:
            self._emit_structured(ev, caller)
            return
        caller.text += caller.detok.feed(ev.token_ids)
        finished, reason = ev.finished, ev.finish_reason
        if finished:
            caller.text += caller.detok.flush()
        hit = min((i for i in (caller.text.find(s) for s in caller.stop) if i >= 0), default=-1)
        if hit >= 0:
            caller.text = caller.text[:hit]
            finished, reason = True, "stop"
            self.scheduler.stop(seq, "stop")
            self.runner.release(seq)
        # hold back a tail that could still grow into a stop string
        hold = 0 if finished else max((len(s) - 1 for s in caller.stop), default=0)
        ready = len(caller.text) - hold
        text = caller.text[caller.sent:ready] if ready > caller.sent else ""
        caller.sent = max(caller.sent, ready)
        now = time.perf_counter()
        self._deliver(seq.request_id, Delta(
            seq.request_id, text, ev.token_ids, finished, reason, seq.prompt_len,
            len(seq.generated), seq.t_first_block - seq.t_submit if seq.t_first_block else None,
            now - seq.t_submit,
            seq.t_scheduled - seq.t_submit if seq.t_scheduled is not None else None,
            passes=seq.passes,
            first_block_confidence=seq.first_block_conf if seq.t_first_block else None))

    def _emit_structured(self, ev: Committed, caller: _Caller) -> None:
        """A call / JSON answer: nothing readable until the whole skeleton is decoded."""
        seq, state = ev.seq, ev.seq.constraint
        text, call, reason = "", None, ev.finish_reason
        if ev.finished and reason in ("stop", "length"):  # length: ignore_eos ran to the end
            if state.mode == "json":
                text = json.dumps(state.value(), ensure_ascii=False)
            else:
                call, reason = state.tool_call(), "tool_calls"
            reason = "stop" if reason == "length" else reason
        now = time.perf_counter()
        self._deliver(seq.request_id, Delta(
            seq.request_id, text, ev.token_ids, ev.finished, reason, seq.prompt_len,
            len(seq.generated), seq.t_first_block - seq.t_submit if seq.t_first_block else None,
            now - seq.t_submit, tool_call=call))

    def _deliver(self, request_id: str, item) -> None:
        caller = self._callers.get(request_id)
        if caller is None:
            return
        if isinstance(item, BaseException) or item.finished:
            self._callers.pop(request_id, None)
        try:
            caller.loop.call_soon_threadsafe(caller.queue.put_nowait, item)
        except RuntimeError:  # the caller's event loop is gone: nobody listens any more
            self._callers.pop(request_id, None)
            self._aborts.append(request_id)
