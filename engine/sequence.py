"""One request's decoding state on the host: where its blocks, cache and query window lie.

Positions are absolute (0 = first prompt token). Geometry, per family:
  block-causal  blocks aligned to multiples of the model block `mbs`; decode blocks of `dbs`
                (a divisor of mbs) inside them. Query window = the current model block; the
                write segment [cache_len, q_start) holds finished blocks (prompt blocks on the
                first pass, the block just completed afterwards) whose K/V this pass stores -
                the commit pass is fused with the next block's first denoising pass.
  bidirectional blocks of `dbs` counted from the end of the prompt; query window = current block
                to the end of the canvas. With the prefix cache the first pass of each block
                recomputes and stores [0, q_start) (Fast-dLLM v1 PrefixCache); without it every
                pass recomputes everything and stores nothing.
With a logit shift the pass also computes position q_start - 1 (query only) so slot i can read
logit i - 1. `rules` (engine.decoding) add the family's own block rules: the first-token pass of
shifted families, the fixed SDAR and Dream schedules. Knows nothing about tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import Enum

from diffvoice.engine.decoding import FAST, DecodeRules, sdar_schedule
from diffvoice.engine.params import SamplingParams
from diffvoice.engine.policies.reference import dream_factor


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


def round_up(x: int, m: int) -> int:
    return -(-x // m) * m


@dataclass
class Sequence:
    request_id: str
    prompt_ids: list[int]
    params: SamplingParams
    model_block: int  # 0 = bidirectional model
    decode_block: int
    shift: int  # 1 when the family predicts position i from logit i - 1
    prefix_cache: bool
    status: Status = Status.WAITING
    slot: int = -1
    cache_len: int = 0
    d_start: int = 0
    steps_in_block: int = 0
    passes: int = 0
    finish_reason: str | None = None
    generated: list[int] = field(default_factory=list)
    t_submit: float = field(default_factory=time.perf_counter)
    t_first_block: float | None = None
    constraint: object | None = None  # engine.constrained.ConstrainedState (tool call / JSON)
    draft: bool = False  # low priority: paused or shed for real requests (engine.scheduler)
    priority: int = 0  # lower is served first (engine.scheduler); drafts rank below all
    client: str | None = None  # whose request (fair shares among priority > 0 clients)
    rules: DecodeRules = FAST
    ar_pos: int = -1  # block start whose first token the first-token pass committed
    cache_dirty: int = -1  # first cached position a pass rewrote (SDAR's top-k), -1 = none
    t_scheduled: float | None = None  # when it left the waiting queue for a slot
    first_block_conf: float = 1.0  # lowest confidence of a token committed in the first block
    masks_left: int = -1  # masks left in the decode block at the last read (-1: a new block)
    retiring: bool = False  # its last block is decoded, not yet read (Scheduler.commit_ahead)

    def __post_init__(self) -> None:
        self.d_start = self.prompt_len

    @property
    def prompt_len(self) -> int:
        return len(self.prompt_ids)

    @property
    def gen_end(self) -> int:
        return self.prompt_len + self.params.max_new_tokens

    @property
    def canvas_end(self) -> int:
        return round_up(self.gen_end, self.model_block) if self.model_block else self.gen_end

    @property
    def d_end(self) -> int:
        if self.model_block:  # aligned sub-blocks
            return min((self.d_start // self.decode_block + 1) * self.decode_block, self.canvas_end)
        return min(self.d_start + self.decode_block, self.canvas_end)

    @property
    def q_start(self) -> int:
        if self.model_block:
            return self.d_start // self.model_block * self.model_block
        return self.d_start

    @property
    def q_end(self) -> int:
        return self.q_start + self.model_block if self.model_block else self.canvas_end

    @property
    def writes(self) -> bool:
        """Does this pass store K/V for [cache_len, q_start)?"""
        if self.model_block:
            return self.cache_len < self.q_start
        return self.prefix_cache and self.steps_in_block == 0 and self.q_start > 0

    @property
    def first_computed(self) -> int:
        """First position this pass feeds through the model."""
        start = 0 if (not self.model_block and self.writes) else self.cache_len
        return max(0, min(start, self.q_start - self.shift))

    @property
    def visible_cache(self) -> int:
        """Cached positions this pass reads (a refresh pass reads none)."""
        return 0 if (not self.model_block and self.writes) else self.cache_len

    @property
    def steps_left(self) -> int:
        return max(1, self.params.steps_per_block - self.steps_in_block)

    # ------------------------------------------------------------------ family rules
    @property
    def first_token_due(self) -> bool:
        """Does this pass commit only the new block's slot 0 from the previous logit (v2)?"""
        return (self.rules.first_token_ar and bool(self.shift) and bool(self.model_block)
                and self.d_start == self.q_start and self.d_start >= self.prompt_len
                and self.ar_pos != self.d_start and self.d_start < self.gen_end)

    @property
    def block_start(self) -> int:
        """Start of the (aligned) decode block holding d_start."""
        if self.model_block:
            return self.d_start // self.decode_block * self.decode_block
        return self.d_start

    @property
    def k_fixed(self) -> int:
        """SDAR's schedule count for this pass (everything left once the schedule is spent)."""
        steps = self.params.steps_per_block
        if self.steps_in_block >= steps:
            return self.decode_block
        return sdar_schedule(self.decode_block, steps)[self.steps_in_block]

    @property
    def dream_f(self) -> float:
        return dream_factor(self.steps_in_block, self.params.steps_per_block)

    def note_window(self, window_start: int, tokens: list[int]) -> None:
        """After a pass: a rule that may rewrite decoded slots touched the prompt's tail."""
        if self.rules.final_commits or window_start >= self.prompt_len:
            return
        n = self.prompt_len - window_start
        if tokens[:n] != self.prompt_ids[window_start:] and self.cache_dirty < 0:
            self.cache_dirty = window_start
