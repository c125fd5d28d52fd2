"""Per-replica labels and the merged cluster view (voice.scale.metrics), without a Ray cluster."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from diffvoice.voice.scale.metrics import MetricsHub, ReplicaMetrics, merge_expositions


def _turn(ms: float) -> dict:
    return {"voice_to_voice_ms": ms, "endpointing_ms": ms / 2, "llm_ttft_ms": 10.0}


def _samples(text: str) -> list:
    return [s for fam in text_string_to_metric_families(text) for s in fam.samples]


def test_every_sample_carries_its_replica():
    metrics = ReplicaMetrics("r1")
    metrics.observe_turn(_turn(400.0))
    metrics.session_opened()
    body, content_type = metrics.render()
    samples = _samples(body.decode())
    assert "text/plain" in content_type
    assert samples and all(s.labels.get("replica") == "r1" for s in samples)
    # the stage label survives beside the new one
    assert any(s.labels.get("stage") == "endpointing" for s in samples)


def test_merge_keeps_each_family_once_and_every_replica_series():
    a, b = ReplicaMetrics("a"), ReplicaMetrics("b")
    for ms in (300.0, 500.0):
        a.observe_turn(_turn(ms))
    b.observe_turn(_turn(900.0))
    b.session_opened()
    merged = merge_expositions([a.render()[0].decode(), b.render()[0].decode()]).decode()
    families = list(text_string_to_metric_families(merged))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "a family's HELP/TYPE must appear once"
    turns = {
        s.labels["replica"]: s.value for s in _samples(merged) if s.name == "diffvoice_turns_total"
    }
    assert turns == {"a": 2.0, "b": 1.0}
    counts = {
        s.labels["replica"]: s.value
        for s in _samples(merged)
        if s.name == "diffvoice_turn_stage_seconds_count" and s.labels["stage"] == "endpointing"
    }
    assert counts == {"a": 2.0, "b": 1.0}


def test_hub_forgets_replicas_it_has_not_heard_from(monkeypatch):
    hub = MetricsHub()
    clock = [1000.0]
    monkeypatch.setattr("diffvoice.voice.scale.metrics.time.time", lambda: clock[0])
    hub.post("old", "x", {"pid": 1})
    clock[0] += 20
    hub.post("new", "y", {"pid": 2})
    snap = hub.snapshot(max_age_s=15)
    assert set(snap) == {"new"} and snap["new"]["pid"] == 2 and snap["new"]["text"] == "y"
    hub.drop("new")
    assert hub.snapshot() == {}
