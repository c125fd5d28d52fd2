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
`test_v1_requests_are_spread`). The counts here never expire; they see only this router's
requests (one per Serve proxy), Ray's probes still see everyone's.

Why a request counts from the moment it is ranked: Ray calls `on_request_routed` only after the
replica has answered that it accepts the request (a round trip), so a burst ranked before the
first answer came back saw every replica at 0 and, as ties within one rank, went wherever Ray's
cache pointed (all 12 on one replica on a loaded machine). So each rank holds one replica, and
a ranked request counts against its first rank's replica (`OngoingCounts.placing`) until Ray
reports where it went (`routed`), that it ended (`completed`), or `PLACING_TTL_S` passes (a
request cancelled while it waited is reported by neither).

Knows nothing about diffvoice: only Ray Serve's public request-router surface.
"""

from __future__ import annotations

import random
import time
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
PLACING_TTL_S = 5.0  # a placement Ray never confirmed nor completed stops counting after this


class OngoingCounts:
    """Requests placed on each replica and not completed yet, by request id: a request Ray
    completes without having routed it (rejected by a full replica) changes nothing, and one
    completed twice is counted down once. `placing` counts a request on the replica it was
    ranked first for until Ray routes or completes it (or `ttl_s` passes)."""

    def __init__(self, *, ttl_s: float = PLACING_TTL_S, clock=time.monotonic) -> None:
        self._requests: dict[Hashable, set[str]] = defaultdict(set)
        self._placing: dict[str, tuple[Hashable, float]] = {}  # request id -> (replica, since)
        self._ttl_s = ttl_s
        self._clock = clock

    def placing(self, replica_id: Hashable, request_id: str) -> None:
        self._placing[request_id] = (replica_id, self._clock())

    def routed(self, replica_id: Hashable, request_id: str) -> None:
        self._placing.pop(request_id, None)
        self._requests[replica_id].add(request_id)

    def completed(self, replica_id: Hashable, request_id: str) -> None:
        self._placing.pop(request_id, None)
        requests = self._requests.get(replica_id)
        if requests is not None:
            requests.discard(request_id)
            if not requests:
                del self._requests[replica_id]

    def __getitem__(self, replica_id: Hashable) -> int:
        requests = self._requests.get(replica_id)
        return (len(requests) if requests else 0) + self._placing_on(replica_id)

    def _placing_on(self, replica_id: Hashable) -> int:
        if not self._placing:
            return 0
        stale = self._clock() - self._ttl_s
        for request_id in [k for k, (_, since) in self._placing.items() if since < stale]:
            del self._placing[request_id]
        return sum(1 for replica, _ in self._placing.values() if replica == replica_id)


def rank_by_ongoing(candidates: Sequence[R], ongoing, *, key=lambda r: r,
                    rng: random.Random | None = None) -> list[list[R]]:
    """`candidates` one to a rank, fewest `ongoing[key(candidate)]` first, ties shuffled."""
    shuffled = list(candidates)
    (rng or random).shuffle(shuffled)
    return [[c] for c in sorted(shuffled, key=lambda c: ongoing[key(c)])]  # sort is stable


class LeastLoadedRequestRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs) -> None:
        self._ongoing = OngoingCounts()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        ranks = rank_by_ongoing(candidate_replicas, self._ongoing, key=lambda r: r.replica_id)
        if ranks and pending_request is not None:
            self._ongoing.placing(ranks[0][0].replica_id,
                                  pending_request.metadata.internal_request_id)
        return ranks

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID,
                          result: ReplicaResult) -> None:
        self._ongoing.routed(replica_id, pending_request.metadata.internal_request_id)

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        self._ongoing.completed(replica_id, internal_request_id)
