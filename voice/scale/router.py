"""`LeastLoadedRequestRouter`: Ray Serve places each new request on the replica with the fewest
ongoing requests.

A voice call is one long-lived WebSocket, so a replica's ongoing requests are its live calls plus
its in-flight /v1 requests. Ray's default router ("power of two choices") compares two random
replicas; this one hands Ray *every* available replica as a single candidate rank, so Ray's own
selection step (cached or probed queue lengths, full replicas skipped, FIFO order kept) picks the
global minimum. Ties are broken at random so equal replicas share new calls evenly.

Knows nothing about diffvoice: only Ray Serve's public request-router surface.
"""

from __future__ import annotations

import random

from ray.serve.request_router import (
    FIFOMixin,
    PendingRequest,
    RequestRouter,
    RunningReplica,
)


class LeastLoadedRequestRouter(FIFOMixin, RequestRouter):
    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        candidates = list(candidate_replicas)
        random.shuffle(candidates)  # Ray keeps the first of equal queue lengths
        return [candidates] if candidates else []
