"""`LeastLoadedRequestRouter`: Ray Serve places each new request on the replica with the fewest
ongoing requests.

A voice call is one long-lived WebSocket, so a replica's ongoing requests are its live calls plus
its in-flight /v1 requests. Ray's default router ("power of two choices") compares two random
replicas; this one ranks *every* available replica by the requests this router placed on it and
that have not completed yet (`OngoingCounts`, kept from Ray's `on_request_routed` /
`on_request_completed` hooks), fewest first, one rank per count, ties in random order so equal
replicas share new calls evenly. Ray's own selection step then takes the first rank with a
replica that is not full (its cached or probed queue length).

Why our own counts and not only Ray's: Ray picks among the replicas whose queue length it has
cached and probes the others only in the background, and its cache entries expire (10 s). When
one replica's entry was fresh and the other's had expired, a dozen requests arriving at once all
went to the fresh one before the background probe came back (tests/voice/scale/test_ray_serve.py
`test_v1_requests_are_spread`, skipped until this). The counts here never expire; they see only
this router's requests (one per Serve proxy), Ray's probes still see everyone's.

Knows nothing about diffvoice: only Ray Serve's public request-router surface.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Hashable, Sequence
from typing import TypeVar

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    ReplicaID,
    ReplicaResult,
    RequestRouter,
    RunningReplica,
)

R = TypeVar("R")


class OngoingCounts:
    """Requests placed on each replica and not completed yet, by request id: a request Ray
    completes without having routed it (rejected by a full replica) changes nothing, and one
    completed twice is counted down once."""

    def __init__(self) -> None:
        self._requests: dict[Hashable, set[str]] = defaultdict(set)

    def routed(self, replica_id: Hashable, request_id: str) -> None:
        self._requests[replica_id].add(request_id)

    def completed(self, replica_id: Hashable, request_id: str) -> None:
        requests = self._requests.get(replica_id)
        if requests is not None:
            requests.discard(request_id)
            if not requests:
                del self._requests[replica_id]

    def __getitem__(self, replica_id: Hashable) -> int:
        requests = self._requests.get(replica_id)
        return len(requests) if requests else 0


def rank_by_ongoing(candidates: Sequence[R], ongoing, *, key=lambda r: r,
                    rng: random.Random | None = None) -> list[list[R]]:
    """`candidates` grouped by `ongoing[key(candidate)]`, fewest first; each group shuffled."""
    ranks: dict[int, list[R]] = defaultdict(list)
    for candidate in candidates:
        ranks[ongoing[key(candidate)]].append(candidate)
    out = []
    for count in sorted(ranks):
        (rng or random).shuffle(ranks[count])
        out.append(ranks[count])
    return out


class LeastLoadedRequestRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs) -> None:
        self._ongoing = OngoingCounts()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        return rank_by_ongoing(candidate_replicas, self._ongoing, key=lambda r: r.replica_id)

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: ReplicaResult) -> None:
        self._ongoing.routed(replica_id, pending_request.metadata.internal_request_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._ongoing.completed(replica_id, internal_request_id)
