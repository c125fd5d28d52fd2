"""How many denoising passes the worker runs back to back before it reads the device once.

A pass-by-pass engine reads every pass's window back to learn whether each row's decode block is
done. Most of those reads are not needed: a fixed-schedule policy finishes a block in a number
of passes the host knows in advance, and a data-dependent one (threshold, entropy) usually in
about as many as its last blocks took. So the worker runs a *block step*: `passes(rows)` passes
of the same rows back to back (ModelRunner.step with a BlockStep, nothing read in between), then
one read of the windows, the masks left and how many passes each row sat out. A row whose block
is done before the step ends sits out the rest unchanged on the device (what the host would
have done, one step late: the wasted passes are counted in `idle`), so greedy answers are the
same token for token as pass by pass.

    n = planner.passes(rows)          # 1 = an ordinary pass
    planner.observe(rows, out)        # after the read: what data-dependent blocks took
    planner.sure_done(row, n)         # will n passes surely finish the row's block? (overlap)
    masks_bound(row) / masks_after(row, m)   # what a pass may still commit (prediction slots)

Per row:
  constrained (tool call / JSON)   1: its skeleton may grow after every pass (constrained.hook)
  fixed schedule                   the passes until the block has no mask, from its schedule and
                                   the masks known at the last read (a new block: its answer
                                   slots); never more, so a sampled row never sits a pass out
                                   (which would draw its noise once more than pass by pass).
                                   sdar_dynamic, which may finish sooner: greedy, the passes left
                                   in its schedule (it commits at least the schedule's count);
                                   sampled, 1
  data-dependent, greedy           a new block: the passes its kind of block took lately (an
                                   average, rounded up); a block that is not done after that:
                                   the masks it has left (each of these policies commits at
                                   least one a pass), so no block takes more than two reads
  data-dependent, sampled          1
plus the v2 first-token pass where one is due. A greedy row may sit passes out, so the step takes
the largest of their counts (rows out of step, after blocks of different lengths, are back in
step after one block step: they all start their next blocks together); a row that must not sit
out a pass (sampled, constrained) caps it at its own count; `max_passes` caps it all. A step of
drafts alone ends at its next pass once a real request waits (Engine.step_rows). Knows nothing
about tensors.
"""

from __future__ import annotations

import math

from diffvoice.engine.decoding import sdar_schedule
from diffvoice.engine.sequence import Sequence

FIXED = frozenset({"low_confidence", "sdar_static", "sdar_dynamic", "dream_topk",
                   "dream_entropy"})


def _policy(seq: Sequence) -> str:
    return seq.params.policy or "low_confidence"


def _schedule_left(seq: Sequence) -> int:
    """Passes left in the block's schedule; the last of them commits every mask left."""
    return max(1, seq.params.steps_per_block - seq.steps_in_block)


def _masks(seq: Sequence) -> int:
    """Masks that decide the block, as of the last read; a new block's slots (those before
    max_new_tokens, where the canvas past it is EOS or no longer decides the answer)."""
    if seq.masks_left >= 0:
        return seq.masks_left
    end = seq.d_end
    if seq.rules.eos_fill or seq.rules.final_commits:
        end = min(end, seq.gen_end)
    return max(1, end - seq.d_start)


def _exact_passes(seq: Sequence) -> int | None:
    """Passes until the block has no mask left, where the policy's counts are known (None:
    they depend on the data)."""
    policy, left, masks = _policy(seq), _schedule_left(seq), _masks(seq)
    if policy == "low_confidence":  # ceil(masks / passes left) a pass
        return min(left, masks)
    if policy in ("dream_topk", "dream_entropy"):  # below n a pass until the last
        return left
    if policy == "sdar_static":
        steps, done = seq.params.steps_per_block, seq.steps_in_block
        counts = sdar_schedule(seq.decode_block, steps)[done:] if done < steps else []
        total = 0
        for j, k in enumerate(counts, 1):
            total += k
            if total >= masks:
                return j
        return len(counts) + 1 if counts else 1
    return None


# policies that commit at least one maskable slot a pass (engine.policies; low_confidence exactly
# ceil(masks / passes left)); the families' own rules may commit none (SDAR's k, Dream's int)
AT_LEAST_ONE = frozenset({"low_confidence", "threshold", "entropy"})


def masks_bound(seq: Sequence) -> int | None:
    """The most maskable slots the row's window can hold at its next pass, where the host can
    bound them without a read (None: it cannot). Only rows whose maskable slots are their
    counted masks: fast decoding (EOS fill, final commits: masks behind an EOS or past
    max_new_tokens are filled), greedy and unconstrained (sampled rows draw noise over the whole
    window; a schema may block any commit)."""
    rules = seq.rules
    if (not rules.eos_fill or not rules.final_commits or seq.constraint is not None
            or seq.params.temperature > 0):
        return None
    return _masks(seq)


def masks_after(seq: Sequence, masks: int) -> int:
    """A bound on the masks left after a pass that began with at most `masks` (monotone in it:
    a bound in, a bound out). Call before Scheduler.advance accounts the pass."""
    policy = _policy(seq)
    if seq.first_token_due or policy not in AT_LEAST_ONE or masks <= 0:
        return max(0, masks)
    if policy == "low_confidence":
        return masks - math.ceil(masks / seq.steps_left)
    return masks - 1


class BlockStepPlanner:
    def __init__(self, max_passes: int = 16, prior: float = 2.0):
        self.max_passes = max_passes
        self.prior = prior
        self._took: dict[tuple, float] = {}  # (policy, threshold, decode block) -> passes

    def _kind(self, seq: Sequence) -> tuple:
        return _policy(seq), seq.params.threshold, seq.params.entropy_bound, seq.decode_block

    def row_passes(self, seq: Sequence) -> int:
        if seq.constraint is not None:
            return 1
        first = int(seq.first_token_due)
        policy, greedy = _policy(seq), seq.params.temperature <= 0
        if policy in FIXED:
            exact = _exact_passes(seq)
            if exact is not None:
                return first + exact
            return first + _schedule_left(seq) if greedy else 1
        if not greedy:
            return 1
        if seq.masks_left < 0:  # a new block
            return first + max(1, math.ceil(self._took.get(self._kind(seq), self.prior) - 0.25))
        return first + _masks(seq)

    @staticmethod
    def sure_done(seq: Sequence, passes: int) -> bool:
        """Will `passes` passes from now surely leave the row's decode block without a mask (a
        fixed schedule that ends within them)? Then the host knows the row's next block before
        it reads this one (Scheduler.commit_ahead, EngineConfig.overlap)."""
        if seq.constraint is not None or _policy(seq) not in FIXED:
            return False
        exact = _exact_passes(seq)
        return exact is not None and passes >= int(seq.first_token_due) + exact

    def passes(self, rows: list[Sequence]) -> int:
        may_idle, exact = [0], [self.max_passes]  # greedy rows: the most; others cap it
        for r in rows:
            idle_ok = r.params.temperature <= 0 and r.constraint is None
            (may_idle if idle_ok else exact).append(self.row_passes(r))
        return max(1, min(*exact, max(may_idle) or self.max_passes))

    def observe(self, rows: list[Sequence], out) -> None:
        """After a read: how many passes each data-dependent row's finished block took
        (an exponential average per kind of block)."""
        for i, seq in enumerate(rows):
            if out.remaining[i] > 0 or _policy(seq) in FIXED:
                continue
            took = seq.steps_in_block + 1 - (out.idle[i] if out.idle else 0)
            kind = self._kind(seq)
            old = self._took.get(kind)
            self._took[kind] = took if old is None else 0.75 * old + 0.25 * took
