"""The least-loaded request router's bookkeeping and ranking (voice.scale.router), without a Ray
cluster; tests/voice/scale/test_ray_serve.py runs it inside Serve's proxy."""

from __future__ import annotations

import collections
import random

import pytest

pytest.importorskip("ray.serve", reason="Ray Serve is the optional `ray` extra")

from diffvoice.voice.scale.router import OngoingCounts, rank_by_ongoing  # noqa: E402


def test_counts_follow_routed_and_completed_requests_by_id():
    counts = OngoingCounts()
    for i in range(3):
        counts.routed("a", f"r{i}")
    counts.routed("b", "r9")
    assert (counts["a"], counts["b"], counts["c"]) == (3, 1, 0)
    counts.completed("a", "r1")
    counts.completed("a", "r1")  # completed twice: counted down once
    counts.completed("b", "never-routed")  # rejected by a full replica: never routed
    counts.completed("c", "r0")  # a replica this router never used
    assert (counts["a"], counts["b"], counts["c"]) == (2, 1, 0)
    counts.completed("a", "r0")
    counts.completed("a", "r2")
    counts.completed("b", "r9")
    assert counts["a"] == counts["b"] == 0 and not counts._requests  # nothing kept for idle ones


def test_ranks_group_replicas_by_ongoing_requests_fewest_first():
    rng = random.Random(0)
    for _ in range(200):
        ongoing = {name: rng.randrange(4) for name in "abcdef"}
        ranks = rank_by_ongoing(list(ongoing), ongoing, rng=rng)
        assert sorted(r for rank in ranks for r in rank) == sorted(ongoing)  # each once
        levels = [{ongoing[r] for r in rank} for rank in ranks]
        assert all(len(level) == 1 for level in levels)  # one count per rank
        flat = [level.pop() for level in levels]
        assert flat == sorted(set(ongoing.values()))  # fewest first, every count once
    assert rank_by_ongoing([], {}) == []


def test_ties_are_shared_evenly():
    rng = random.Random(1)
    first = collections.Counter(rank_by_ongoing(["a", "b", "c"], collections.Counter(),
                                                rng=rng)[0][0] for _ in range(3000))  # fmt: skip
    assert set(first) == {"a", "b", "c"} and min(first.values()) > 850


def test_a_burst_of_requests_spreads_when_each_goes_to_the_first_rank():
    """What the v1 test sees through Ray: 12 requests arriving at once, each placed on its first
    rank's first replica and counted as routed before the next one is ranked."""
    counts = OngoingCounts()
    replicas = [f"replica-{i}" for i in range(2)]
    for i in range(12):
        chosen = rank_by_ongoing(replicas, counts, rng=random.Random(i))[0][0]
        counts.routed(chosen, f"req{i}")
    assert [counts[r] for r in replicas] == [6, 6]
