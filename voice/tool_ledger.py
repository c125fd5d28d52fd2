"""A call's tool effects, held until the caller hears them confirmed.

A booking or cancellation one of the call's tools made is kept only once the reply that speaks
its result starts playing; a barge-in, a discarded reply or the end of the call before that
undoes it (docs/tool-calling.md: "what a caller can rely on").

    ledger = ToolLedger(settle)        # settle(ids, keep): the book's (agent.tools), run in
                                       # a worker thread, one change at a time
    hold = ledger.holder(call_id)      # before a tool runs; hold(ids) -> bool, thread-safe
    await ledger.on_frame(where, frame, direction)   # the call's taps (voice.pipeline)
    await ledger.close()               # the call ended: undo what is still held
    ledger.log                         # [{"call_id", "ids", "outcome": kept|undone, "why"}]

Rules:
* a holder made before an interruption (or the call's end) refuses its change, which the tool
  then undoes at once: the reply the call belonged to was discarded while the tool ran;
* one holder per call id: a second one for the same id refuses (a change is never applied
  twice for one call);
* held changes are kept at the first audio frame written of the answer that comes after them
  (the confirmation: the re-prompt with the tool's result), or at its first text when that
  answer is not spoken (skip_tts: a text-only Realtime response); the answer is known by its
  LLMFullResponseStartFrame reaching the output, so the tail of an earlier answer's audio
  confirms nothing;
* an InterruptionFrame at the output while changes are held undoes them.

Knows nothing about the book or the model: only ids and frames.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable

from loguru import logger
from pipecat.frames.frames import (
    InterruptionFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    OutputAudioRawFrame,
)
from pipecat.processors.frame_processor import FrameDirection

MAX_LOG = 256  # entries kept per call
# one thread for every call's settles: changes to the book are applied in the order decided
_SETTLE = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="diffvoice-settle")


class ToolLedger:
    def __init__(self, settle: Callable[[list[int], bool], None]) -> None:
        self._settle = settle
        self._lock = threading.Lock()
        self._epoch = 0  # bumped by each interruption and by close()
        self._ids_seen: set[str] = set()
        self._held: list[tuple[str, list[int]]] = []  # (call id, ids) not yet settled
        self._armed = False  # the answer after the held changes has reached the output
        self._closed = False
        self.log: list[dict] = []

    # ------------------------------------------------------------------ tools (any thread)

    def holder(self, call_id: str) -> Callable[[list[int]], bool]:
        with self._lock:
            epoch, fresh = self._epoch, call_id not in self._ids_seen and not self._closed
            self._ids_seen.add(call_id)

        def hold(ids: list[int]) -> bool:
            with self._lock:
                if not fresh or epoch != self._epoch:
                    why = "repeated call id" if not fresh else "reply discarded while the " \
                        "tool ran"
                    self._note(call_id, ids, "undone", why)
                    return False
                self._held.append((call_id, list(ids)))
                self._armed = False
                return True

        return hold

    # ------------------------------------------------------------------ the call (event loop)

    async def on_frame(self, where: str, frame, direction=FrameDirection.DOWNSTREAM) -> None:
        if where != "out" or direction != FrameDirection.DOWNSTREAM or not self._held:
            if isinstance(frame, InterruptionFrame) and where == "out":
                with self._lock:
                    self._epoch += 1  # a tool still running belongs to a discarded reply
            return
        if isinstance(frame, InterruptionFrame):
            await self._finish(keep=False, why="barge-in before the confirmation played")
        elif isinstance(frame, LLMFullResponseStartFrame):
            self._armed = True
        elif self._armed and (isinstance(frame, OutputAudioRawFrame) or (
                isinstance(frame, LLMTextFrame) and frame.skip_tts)):
            await self._finish(keep=True, why="the confirmation started playing")

    async def close(self) -> None:
        with self._lock:
            self._closed = True
        await self._finish(keep=False, why="the call ended before the confirmation played")

    async def _finish(self, *, keep: bool, why: str) -> None:
        with self._lock:
            held, self._held = self._held, []
            self._armed = False
            if not keep:
                self._epoch += 1
            for call_id, ids in held:
                self._note(call_id, ids, "kept" if keep else "undone", why)
        ids = [i for _, group in held for i in group]
        if not ids:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(_SETTLE, self._settle, ids, keep)
        except Exception as e:  # the book is unreachable: the change stays held (undo_stale)
            logger.warning(f"tool ledger: settling {ids} (keep={keep}) failed: {e!r}")

    def _note(self, call_id: str, ids: list[int], outcome: str, why: str) -> None:
        if len(self.log) < MAX_LOG:
            self.log.append({"call_id": call_id, "ids": list(ids), "outcome": outcome,
                             "why": why})
