"""One call, many doors: the only place a call is assembled and run.

A transport (voice.transport.ws_session for /ws, voice.telephony.twilio_call for Twilio Media
Streams, voice.realtime.session for /v1/realtime) accepts its socket, authenticates and admits
it, makes the pipecat transport its audio goes through, and then:

    call = start_call(state, transport, session_id=..., on_event=..., ...)
    if not await call.started(timeout):   # every processor is up (or the call failed)
        ...
    await call.queue_frames([...])        # frames into the top of the pipeline (text turns)
    ...
    await call.close("client left")       # bounded cancel, runner awaited, last turn reported

`start_call` takes the options of `voice.pipeline.build_pipeline` (stop_secs, eager drafts,
sample rates, caller, on_latency, on_event, observe, before_llm) and `build=` a stand-in builder
(tests; it returns a CallParts or a (pipeline, worker) tuple). What a call exposes is `Call`:
`tracker` (the turn tracker: `records`, the latency record of each turn), `llm` (the call's
DiffusionLLMService), `turn_end`, `context`, `vad`, `done` (the runner task) and `cancel` /
`close`. A transport never imports build_pipeline or reads attributes off pipecat's worker.

Session accounting and admission stay with the transport (they are about sockets: a /ws
socket counts while it waits for its handshake, a Twilio stream after its claim).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from loguru import logger
from pipecat.frames.frames import Frame
from pipecat.pipeline.worker import PipelineWorker
from pipecat.workers.runner import WorkerRunner

from diffvoice.voice.pipeline import CallParts, build_pipeline

READY_SECS = 30.0  # a pipeline that has not started by then failed
SHUTDOWN_SECS = 5.0  # a cancel, and then the runner, each get this long


class Call:
    """A running call: its pipeline's worker under a runner task (see the module docstring)."""

    def __init__(self, session_id: str, parts: CallParts) -> None:
        self.session_id = session_id
        self.parts = parts
        self._started = asyncio.Event()
        self._closed = False
        self._cancel_task: asyncio.Task | None = None

        @parts.worker.event_handler("on_pipeline_started")
        async def _started(_worker, _frame):
            self._started.set()

        runner = WorkerRunner(handle_sigint=False, check_dangling_tasks=False)
        self.done = asyncio.create_task(self._run(runner), name=f"call-{session_id}")

    async def _run(self, runner: WorkerRunner) -> None:
        await runner.add_workers(self.parts.worker)
        await runner.run()

    # what a call exposes
    @property
    def worker(self) -> PipelineWorker:
        return self.parts.worker

    @property
    def tracker(self):
        return self.parts.tracker

    @property
    def llm(self):
        return self.parts.llm

    @property
    def context(self):
        return self.parts.context

    @property
    def turn_end(self):
        return self.parts.turn_end

    @property
    def vad(self):
        return self.parts.vad

    @property
    def records(self) -> list[dict]:
        """The latency record of each turn so far."""
        return self.tracker.records if self.tracker is not None else []

    @property
    def is_started(self) -> bool:
        return self._started.is_set()

    async def started(self, within: float = READY_SECS) -> bool:
        """Wait until every processor has started (StartFrame reached the sink): a cancel from
        then on reaches the tasks processors create in start(), e.g. the STT's segment task.
        False when the pipeline ended or did not start `within` seconds."""
        ready = asyncio.ensure_future(self._started.wait())
        try:
            done, _ = await asyncio.wait({ready, self.done}, timeout=within,
                                         return_when=asyncio.FIRST_COMPLETED)
        finally:
            ready.cancel()
        return self._started.is_set()

    async def queue_frames(self, frames: Sequence[Frame]) -> None:
        await self.worker.queue_frames(list(frames))

    def cancel(self, reason: str) -> None:
        """End the pipeline soon (once it has started: cancelling mid-start would orphan the
        tasks processors create in start()); returns at once, `close` awaits it."""
        if self._cancel_task is None:
            logger.info(f"call {self.session_id}: ending ({reason})")
            self._cancel_task = asyncio.create_task(self._cancel(reason))

    async def _cancel(self, reason: str) -> None:
        if not self._started.is_set() and not self.done.done():
            await self.started(READY_SECS)
        try:  # bounded: a processor stuck in a write must not hold the call
            await asyncio.wait_for(self.worker.cancel(reason=reason), SHUTDOWN_SECS)
        except TimeoutError:
            logger.warning(f"call {self.session_id}: pipeline cancel took over "
                           f"{SHUTDOWN_SECS:.0f} s")
        except Exception as e:
            logger.debug(f"call {self.session_id}: cancel: {e!r}")

    async def close(self, reason: str = "call closed") -> None:
        """Cancel (if still running), await the runner, report the turn still waiting for
        audio. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if not self.done.done():
            self.cancel(reason)
        if self._cancel_task is not None:
            await asyncio.gather(self._cancel_task, return_exceptions=True)
        try:
            await asyncio.wait_for(asyncio.shield(self.done), SHUTDOWN_SECS)
        except (TimeoutError, asyncio.CancelledError, Exception) as e:
            if not isinstance(e, asyncio.CancelledError) or not self.done.cancelled():
                logger.warning(f"call {self.session_id}: pipeline shutdown: {e!r}")
            self.done.cancel()
        if self.tracker is not None:  # flushes a turn that never produced audio
            with contextlib.suppress(Exception):
                await self.tracker.close()
        if self.parts.ledger is not None:  # bookings nobody heard confirmed are undone
            await self.parts.ledger.close()


def start_call(state, transport, *, session_id: str, build: Callable | None = None,
               **options) -> Call:
    """Assemble the call's pipeline over `transport` and start running it (see the module
    docstring for `options`)."""
    parts = CallParts.of((build or build_pipeline)(state, transport, session_id=session_id,
                                                   **options))
    return Call(session_id, parts)
