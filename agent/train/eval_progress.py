"""`eval-model`'s progress on stderr: `EvalProgress(questions, calls)`, then `.done(...)` after
each question set (agent.train.evaluate)."""

from __future__ import annotations

import sys
import time


class EvalProgress:
    """One line on stderr per finished question set: how far, how long so far, and the time
    left at the pace so far (a closed-loop call weighs as 5 questions)."""

    CALL_WEIGHT = 5.0

    def __init__(self, questions: int, calls: int):
        self.total = questions + self.CALL_WEIGHT * calls
        self.done_units = 0.0
        self.t0 = time.perf_counter()
        print(f"eval-model: {questions} questions and {calls} closed-loop calls to run; "
              "the time left is printed after each set", file=sys.stderr, flush=True)

    def done(self, what: str, questions: int, replies, calls: int = 0) -> None:
        self.done_units += questions + self.CALL_WEIGHT * calls
        elapsed = time.perf_counter() - self.t0
        left = elapsed / self.done_units * (self.total - self.done_units) if self.done_units else 0
        right = ""
        if replies:
            right = f", {sum(r.correct for r in replies) / len(replies):.1%} right"
        print(f"eval-model: {what}: done{right} ({self.done_units / self.total:.0%}, "
              f"{elapsed / 60:.1f} min so far, ~{left / 60:.1f} min left)", file=sys.stderr,
              flush=True)
