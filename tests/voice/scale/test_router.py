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


def test_ranks_hold_one_replica_each_fewest_first():
    rng = random.Random(0)
    for _ in range(200):
        ongoing = {name: rng.randrange(4) for name in "abcdef"}
        ranks = rank_by_ongoing(list(ongoing), ongoing, rng=rng)
        assert all(len(rank) == 1 for rank in ranks)
        order = [rank[0] for rank in ranks]
        assert sorted(order) == sorted(ongoing)  # each once
        assert [ongoing[r] for r in order] == sorted(ongoing.values())  # fewest first
    assert rank_by_ongoing([], {}) == []


def test_ties_are_shared_evenly():
    rng = random.Random(1)
    first = collections.Counter(rank_by_ongoing(["a", "b", "c"], collections.Counter(),
                                                rng=rng)[0][0] for _ in range(3000))  # fmt: skip
    assert set(first) == {"a", "b", "c"} and min(first.values()) > 850


def test_a_burst_of_requests_spreads_before_ray_confirms_any():
    """What the v1 test sees through Ray: 12 requests arriving at once are all ranked before
    Ray's `on_request_routed` (which waits for the replica's answer) fires for the first one.
    Each counts on its first rank's replica from the moment it is ranked."""
    counts = OngoingCounts()
    replicas = [f"replica-{i}" for i in range(2)]
    placed = []
    for i in range(12):
        chosen = rank_by_ongoing(replicas, counts, rng=random.Random(i))[0][0]
        counts.placing(chosen, f"req{i}")
        placed.append(chosen)
    assert collections.Counter(placed) == {"replica-0": 6, "replica-1": 6}
    for i in reversed(range(12)):  # Ray confirms them in any order, one went elsewhere
        counts.routed(replicas[0] if i == 0 else placed[i], f"req{i}")
    assert counts["replica-0"] + counts["replica-1"] == 12
    assert counts["replica-0"] == 6 + (placed[0] != "replica-0")


def test_a_placement_ray_never_reports_stops_counting():
    now = [0.0]
    counts = OngoingCounts(ttl_s=5.0, clock=lambda: now[0])
    counts.placing("a", "cancelled-while-waiting")
    counts.placing("a", "rejected")
    assert counts["a"] == 2
    counts.completed("a", "rejected")  # rejected by a full replica: Ray completes it unrouted
    assert counts["a"] == 1
    now[0] = 5.1
    assert counts["a"] == 0 and not counts._placing
    counts.placing("b", "r1")
    counts.placing("a", "r1")  # ranked again (Ray's retry): counts where it is now headed
    assert (counts["a"], counts["b"]) == (1, 0)
