"""Pure-Python scheduler: admission, slots, and what each pass means for each request.

    plan = scheduler.schedule()          # rows for the next pass (admits waiting requests)
    events = scheduler.update(plan, out) # block completions -> Committed events, finished requests
    ahead = scheduler.commit_ahead(rows) # overlap: the rows' next blocks before `out` is read
Requests join and leave between passes. Knows nothing about CUDA or tensors: `out` only needs
`window_start`, `tokens` and `remaining` lists (tests feed fake results).

Drafts (`seq.draft`, speculative answers a voice call makes before its caller has finished) are
low priority: at most `max_drafts` are in flight (one more raises DraftRefused); waiting real
requests are admitted first and a running draft is shed (finished with reason "shed", listed in
`self.shed` for the engine to report) when a real request waits for its slot; unless
`drafts_share_passes`, a pass that has real rows carries no draft rows (drafts pause).
`promote(request_id)` turns a draft into a real request (its caller now needs the answer).

Priorities (`seq.priority`, lower first; 0 is the best and the default): waiting requests are
admitted best first; a request of priority > 0 never takes the last `reserved_slots` free slots
and is refused (PriorityRefused, an EngineOverloaded) once priority > 0 requests hold
max_running + max_queued - `reserved_places` places (the reserved slots and a quarter of the
queue), or the engine is full, so priority-0 work (live calls) always finds room; unless
`priority_share_passes`, a pass carries only the best priority among its rows (the others pause,
as drafts do). `rank(seq)` orders all of it: drafts last, then by priority.

Clients (`seq.client`, any hashable key; None: nobody's): among waiting requests of one rank,
the one whose client holds the fewest places goes first, so one client's backlog cannot make
another's single request wait behind all of it; and when priority > 0 requests fill their
places, a request from a client holding fewer places evicts the newest waiting request of the
client holding the most (finished "evicted", listed in `self.evicted` for the engine to refuse
with PriorityRefused) instead of being refused itself.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

from diffvoice.engine.sequence import Sequence, Status


class EngineOverloaded(RuntimeError):
    """More concurrent requests than max_running + max_queued."""


class PriorityRefused(EngineOverloaded):
    """A priority > 0 request beyond the places it may hold (Scheduler.reserved_places), or
    while the engine is full."""


class DraftRefused(EngineOverloaded):
    """A draft beyond max_drafts (drafts are optional work: the caller answers normally)."""


@dataclass
class Committed:
    """A decode block became final for one request."""

    seq: Sequence
    token_ids: list[int]  # committed ids, cut at the first EOS
    finished: bool
    finish_reason: str | None


def rank(seq: Sequence) -> tuple[bool, int]:
    """Lower is served first: real requests before drafts, then by priority."""
    return seq.draft, seq.priority


class Scheduler:
    def __init__(self, max_running: int, max_queued: int, eos_ids: tuple[int, ...],
                 max_drafts: int = 2, drafts_share_passes: bool = False,
                 reserved_slots: int = 0, priority_share_passes: bool = False):
        self.max_drafts = max_drafts
        # at least one slot stays open to every priority
        self.reserved_slots = max(0, min(reserved_slots, max_running - 1))
        # places (running or queued) priority > 0 leaves to priority 0: the reserved slots and a
        # quarter of the queue (live calls' turns and their drafts queue too)
        self.reserved_places = self.reserved_slots + (max_queued // 4 if self.reserved_slots
                                                      else 0)
        self.priority_share_passes = priority_share_passes
        self.drafts_share_passes = drafts_share_passes
        self.shed: list[Sequence] = []  # drafts shed by the last schedule(), for the engine
        self.evicted: list[Sequence] = []  # waiting requests add() evicted, for the engine
        self.shed_total = 0
        self.max_running = max_running
        self.max_queued = max_queued
        self.eos_ids = set(eos_ids)
        self.waiting: deque[Sequence] = deque()
        self.running: dict[int, Sequence] = {}  # slot -> sequence
        self.free_slots = list(range(max_running - 1, -1, -1))
        self.by_id: dict[str, Sequence] = {}
        # free slots whose K/V still holds a finished conversation: slot -> its cached token ids
        # (block-causal models only; the cache is exact, so a later turn that starts with the
        # same tokens reuses those blocks instead of prefilling them again)
        self.parked: dict[int, list[int]] = {}
        self.reused_tokens = 0

    def __len__(self) -> int:
        return len(self.waiting) + len(self.running)

    def add(self, seq: Sequence) -> None:
        if seq.request_id in self.by_id:
            raise ValueError(f"request id {seq.request_id!r} is already in use")
        if seq.priority > 0 and self.reserved_slots:
            low = sum(s.priority > 0 for s in self.by_id.values())
            room = self.max_running + self.max_queued - self.reserved_places
            if low >= room:
                victim = self._fair_victim(seq)
                if victim is None:
                    raise PriorityRefused(
                        f"engine is full for priority {seq.priority}: {low} such requests "
                        f"running or queued ({self.reserved_places} of max_running + "
                        f"max_queued are reserved for priority 0)")
                self.waiting.remove(victim)
                self._finish(victim, "evicted")
                self.evicted.append(victim)
        if len(self) >= self.max_running + self.max_queued:
            full = PriorityRefused if seq.priority > 0 and self.reserved_slots \
                else EngineOverloaded  # (with no reservation every request is alike)
            raise full(
                f"engine is full: {len(self.running)} running and {len(self.waiting)} queued "
                f"(max_running={self.max_running}, max_queued={self.max_queued})")
        if seq.draft and self.drafts_in_flight() >= self.max_drafts:
            raise DraftRefused(f"{self.drafts_in_flight()} drafts in flight "
                               f"(max_drafts={self.max_drafts})")
        self.waiting.append(seq)
        self.by_id[seq.request_id] = seq

    def _places(self) -> dict:
        """Places (running or waiting) each client's priority > 0 requests hold."""
        held: dict = {}
        for s in self.by_id.values():
            if s.priority > 0 and s.client is not None:
                held[s.client] = held.get(s.client, 0) + 1
        return held

    def _fair_victim(self, seq: Sequence) -> Sequence | None:
        """The newest waiting request of the client holding the most priority > 0 places, if
        that client holds at least two more than `seq`'s (so eviction only ever evens out)."""
        if seq.client is None:  # nobody's: no share to even out
            return None
        held = self._places()
        mine = held.get(seq.client, 0)
        waiting = [s for s in self.waiting if s.priority >= seq.priority > 0
                   and s.client is not None and s.client != seq.client]
        if not waiting:
            return None
        top = max(waiting, key=lambda s: (held[s.client], s.t_submit))
        return top if held[top.client] >= mine + 2 else None

    def abort(self, request_id: str) -> Sequence | None:
        seq = self.by_id.get(request_id)
        if seq is None:
            return None
        if seq.status is Status.WAITING:
            self.waiting.remove(seq)
        self._finish(seq, "abort")
        return seq

    def _finish(self, seq: Sequence, reason: str) -> None:
        if seq.status is Status.RUNNING:
            del self.running[seq.slot]
            self.free_slots.append(seq.slot)
            cached = (seq.prompt_ids + seq.generated)[: seq.cache_len]
            if seq.model_block and reason in ("stop", "length") and len(cached) == seq.cache_len:
                # a block whose prompt tokens a pass rewrote (SDAR's top-k) is not reusable
                self.parked[seq.slot] = cached[: seq.cache_dirty] if seq.cache_dirty >= 0 \
                    else cached
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self.by_id.pop(seq.request_id, None)

    def drafts_in_flight(self) -> int:
        return sum(s.draft for s in self.by_id.values())

    def promote(self, request_id: str) -> bool:
        """A draft becomes a real request (served first from the next pass on)."""
        seq = self.by_id.get(request_id)
        if seq is None:
            return False
        seq.draft = False
        return True

    def schedule(self) -> tuple[list[Sequence], list[Sequence]]:
        """-> (rows for this pass, sequences admitted now that need their canvas laid out).

        Real requests are admitted before drafts, shedding running drafts (newest first) when no
        slot is free for them; drafts are admitted only when no real request waits.
        """
        admitted = []
        self.shed = []
        if len(self.waiting) > 1:  # best first, then the client holding fewest slots;
            running: dict = {}  # sorted() is stable: FIFO within those
            for s in self.running.values():
                if s.client is not None:
                    running[s.client] = running.get(s.client, 0) + 1
            self.waiting = deque(sorted(self.waiting, key=lambda s: (
                rank(s), running.get(s.client, 0) if s.client is not None else 0)))
        # drafts are shed for priority-0 requests only (a draft is a live call's early answer)
        real_waiting = [s for s in self.waiting if not s.draft and s.priority == 0]
        while len(real_waiting) > len(self.free_slots):
            drafts = [s for s in self.running.values() if s.draft]
            if not drafts:
                break
            victim = max(drafts, key=lambda s: s.t_submit)
            self._finish(victim, "shed")
            self.shed.append(victim)
        for seq in list(self.waiting):
            if not self.free_slots or (seq.draft and any(
                    not s.draft and self._admissible(s) for s in self.waiting)):
                break
            if not self._admissible(seq):
                continue  # the last free slots are kept for priority 0 (drafts may use them)
            self.waiting.remove(seq)
            seq.slot, seq.cache_len = self._pick_slot(seq)
            self.reused_tokens += seq.cache_len
            seq.status = Status.RUNNING
            seq.t_scheduled = time.perf_counter()
            self.running[seq.slot] = seq
            admitted.append(seq)
        self.shed_total += len(self.shed)
        rows = sorted((s for s in self.running.values() if not s.retiring),
                      key=lambda s: s.slot)
        if not self.drafts_share_passes and any(not s.draft for s in rows):
            rows = [s for s in rows if not s.draft]  # drafts pause while real rows run
        if not self.priority_share_passes and len(rows) > 1:
            best = min(s.priority for s in rows)  # worse priorities pause while it runs
            if any(s.priority != best for s in rows):
                rows = [s for s in rows if s.priority == best or s.draft]
        return rows, admitted

    def _admissible(self, seq: Sequence) -> bool:
        """Whether `seq` may take a free slot now (priority > 0 leaves the reserved ones)."""
        return seq.priority == 0 or len(self.free_slots) > self.reserved_slots

    def better_waiting(self, than: tuple[bool, int]) -> bool:
        """Whether a waiting request outranks `than` (a running step's rank) and can be
        admitted now (or, priority 0, by shedding a draft): the step should yield to it."""
        drafts_running = any(s.draft for s in list(self.running.values()))
        for seq in list(self.waiting):  # another thread may append meanwhile
            if rank(seq) < than and self._admissible(seq) and (
                    self.free_slots or (drafts_running and seq.priority == 0)):
                return True
        return False

    def _pick_slot(self, seq: Sequence) -> tuple[int, int]:
        """-> (slot, cached positions reused): the parked slot sharing the longest whole-block
        prefix with this prompt, else a slot without a cache, else the oldest parked one."""
        best, best_len = None, 0
        if seq.model_block:
            for slot in self.free_slots:
                cached = self.parked.get(slot)
                if not cached:
                    continue
                n = 0
                limit = min(len(cached), seq.prompt_len)
                while n < limit and cached[n] == seq.prompt_ids[n]:
                    n += 1
                n = n // seq.model_block * seq.model_block
                if n > best_len:
                    best, best_len = slot, n
        if best is None:
            uncached = [s for s in self.free_slots if s not in self.parked]
            best = uncached[-1] if uncached else self.free_slots[0]  # oldest parked first
        self.free_slots.remove(best)
        self.parked.pop(best, None)
        return best, best_len

    @staticmethod
    def advance(rows: list[Sequence]) -> None:
        """What one pass changes in its rows' host state whatever it decoded: the K/V it stored,
        its count, the schedule step (or a v2 block's first-token pass). The runner's passes of
        a block step are accounted with this alone; the last one's output goes to `update`."""
        for seq in rows:
            if seq.status is not Status.RUNNING:
                continue
            if seq.writes:
                seq.cache_len = seq.q_start
            seq.passes += 1
            if seq.first_token_due:  # this pass committed only the block's first token
                seq.ar_pos = seq.d_start
            else:
                seq.steps_in_block += 1

    def commit_ahead(self, rows: list[Sequence]) -> list[tuple | None]:
        """Overlap (Engine, EngineConfig.overlap): the last pass of a block step that surely
        finishes every row's decode block (BlockStepPlanner.sure_done) is queued, not yet read.
        Account that pass and move each row to its next block now, so the next step can be
        planned and queued before this one is read; a row whose block reaches max_new_tokens
        surely finishes and is kept out of later steps (`retiring`). -> per row what `update`
        needs at the read: (d_start, d_end, cache_len, passes) of the block it commits."""
        self.advance(rows)
        ahead = []
        for seq in rows:
            if seq.status is not Status.RUNNING:
                ahead.append(None)
                continue
            ahead.append((seq.d_start, seq.d_end, seq.cache_len, seq.passes))
            seq.retiring = seq.d_end >= seq.gen_end
            self._next_block(seq)
        return ahead

    @staticmethod
    def _next_block(seq: Sequence) -> None:
        """The row's decode block is committed: the next one starts, no pass of it run yet."""
        seq.d_start = seq.d_end
        seq.steps_in_block = 0
        seq.masks_left = -1

    def update(self, rows: list[Sequence], out, ahead: list[tuple | None] | None = None
               ) -> list[Committed]:
        """Account one pass (`advance`) and what it left in each row's window (`out`): a row
        whose decode block has no mask left commits it, and may finish. With `ahead` (from
        `commit_ahead`) the pass was accounted and the blocks moved on already: only the tokens
        are taken (a row that ends at an EOS here may have run one step more meanwhile: its
        cache and pass count are those of this step)."""
        if ahead is None:
            self.advance(rows)
        events = []
        for i, seq in enumerate(rows):
            if seq.status is not Status.RUNNING:
                continue  # aborted while the pass ran
            seq.note_window(out.window_start[i], out.tokens[i])
            if ahead is not None:
                if ahead[i] is None:
                    continue
                d_start, d_end, cache_len, passes = ahead[i]
                if out.remaining[i] > 0:
                    raise RuntimeError(f"{seq.request_id}: a block step predicted to finish its "
                                       f"block left {out.remaining[i]} masks")
            else:
                seq.masks_left = out.remaining[i]
                if out.remaining[i] > 0:
                    continue
                d_start, d_end, cache_len, passes = seq.d_start, seq.d_end, None, None
            offset = d_start - out.window_start[i]
            block = out.tokens[i][offset: offset + d_end - d_start]
            room = seq.gen_end - d_start  # the canvas may run past max_new_tokens
            finished, reason = len(block) >= room, "length"
            block = block[:room]
            if not seq.params.ignore_eos:
                for j, tid in enumerate(block):
                    if tid in self.eos_ids:
                        block, finished, reason = block[:j], True, "stop"
                        break
            reason = reason if finished else None
            seq.generated.extend(block)
            if seq.t_first_block is None:
                seq.t_first_block = time.perf_counter()
            if ahead is None:
                self._next_block(seq)
            if finished:
                if cache_len is not None:  # what this step left, not a later step's work
                    seq.cache_len, seq.passes = cache_len, passes
                self._finish(seq, reason)
            events.append(Committed(seq, block, finished, reason))
        return events

    def stop(self, seq: Sequence, reason: str) -> None:
        """Finish a running request early (e.g. a stop string matched)."""
        if seq.status is not Status.FINISHED:
            self._finish(seq, reason)
