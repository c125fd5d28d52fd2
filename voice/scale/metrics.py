"""Per-replica Prometheus series and one cluster-wide view.

    ReplicaMetrics(replica_id)       a VoiceMetrics whose render() adds replica="<id>" to every
                                     sample, so series from N replicas never collide
    merge_expositions([text, ...])   one valid exposition (each family's HELP/TYPE once) from
                                     several replicas' texts
    MetricsHub                       the body of a small named Ray actor: each replica posts its
                                     latest labelled text every few seconds; any replica's
                                     GET /metrics/cluster merges the fresh ones
    hub_actor()                      the named hub, created on first use (get-if-exists)

`/metrics` on a replica shows that replica only (Ray Serve routes a scrape to one of them); a
Prometheus that reaches every replica through Ray's own service discovery can scrape those, and
anyone else scrapes `/metrics/cluster`. This module knows nothing about pipecat or FastAPI.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from diffvoice.voice.metrics import VoiceMetrics

HUB_NAME = "diffvoice-metrics-hub"
HUB_NAMESPACE = "diffvoice"
REPLICA_LABEL = "replica"


def _with_label(families: Iterable[Metric], name: str, value: str) -> Iterator[Metric]:
    for family in families:
        out = Metric(family.name, family.documentation, family.type, family.unit)
        out.samples = [
            Sample(s.name, {**s.labels, name: value}, s.value, s.timestamp, s.exemplar)
            for s in family.samples
        ]
        yield out


class _Families:
    """A registry-shaped object generate_latest can render: it just yields the given families."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


class ReplicaMetrics(VoiceMetrics):
    def __init__(self, replica_id: str) -> None:
        super().__init__()
        self.replica_id = replica_id

    def render(self) -> tuple[bytes, str]:
        labelled = _with_label(self.registry.collect(), REPLICA_LABEL, self.replica_id)
        return generate_latest(_Families(labelled)), CONTENT_TYPE_LATEST


def merge_expositions(texts: Iterable[str]) -> bytes:
    """Merge Prometheus text expositions (already distinct by label) family by family."""
    merged: dict[str, Metric] = {}
    for text in texts:
        for family in text_string_to_metric_families(text):
            into = merged.get(family.name)
            if into is None:
                into = merged[family.name] = Metric(
                    family.name, family.documentation, family.type, family.unit
                )
            into.samples.extend(family.samples)
    return generate_latest(_Families(merged.values()))


class MetricsHub:
    """Latest exposition text per replica (the body of a Ray actor; plain class for tests)."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[float, str, dict]] = {}

    def post(self, replica_id: str, text: str, info: dict | None = None) -> None:
        self._latest[replica_id] = (time.time(), text, dict(info or {}))

    def drop(self, replica_id: str) -> None:
        self._latest.pop(replica_id, None)

    def snapshot(self, max_age_s: float = 15.0) -> dict[str, dict]:
        """{replica_id: {"age_s", "text", **info}} for replicas heard from within max_age_s."""
        now = time.time()
        return {
            rid: {"age_s": round(now - t, 3), "text": text, **info}
            for rid, (t, text, info) in self._latest.items()
            if now - t <= max_age_s
        }


def hub_actor():
    """The cluster's named MetricsHub actor (created on first use; lives with the cluster)."""
    import ray

    return (
        ray.remote(num_cpus=0)(MetricsHub)
        .options(name=HUB_NAME, namespace=HUB_NAMESPACE, get_if_exists=True, lifetime="detached")
        .remote()
    )
