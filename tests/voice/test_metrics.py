"""voice.metrics.VoiceMetrics: what a Prometheus scrape sees after turns and sessions."""

import math

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffvoice.voice.metrics import LATENCY_BUCKETS_S, STAGES, VoiceMetrics


def _scrape(metrics):
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


class _StatsOnly:
    """Stands in for engine.Engine: only .stats() is read by the metrics."""

    def __init__(self, stats):
        self._stats = stats

    def stats(self):
        if isinstance(self._stats, Exception):
            raise self._stats
        return self._stats


def test_histograms_match_observed_records():
    rng = np.random.default_rng(0)
    metrics = VoiceMetrics()
    records = [{f"{stage}_ms": float(rng.lognormal(5.5, 0.8)) for stage in STAGES}
               for _ in range(40)]
    records[3]["asr_ms"] = None             # not measured this turn
    records[4]["llm_ttft_ms"] = -5.0        # clock skew: skipped but counted
    records[5]["server_ms"] = math.nan
    records[6]["interrupted"] = True
    for record in records:
        metrics.observe_turn(record)
    samples = _scrape(metrics)
    assert samples[("diffvoice_turns_total", ())] == 40
    assert samples[("diffvoice_turns_interrupted_total", ())] == 1
    for stage in STAGES:
        values = [r[f"{stage}_ms"] for r in records]
        valid = [v / 1000 for v in values
                 if v is not None and math.isfinite(v) and v >= 0]
        label = (("stage", stage),)
        assert samples[("diffvoice_turn_stage_seconds_count", label)] == len(valid)
        assert samples[("diffvoice_turn_stage_seconds_sum", label)] == pytest.approx(sum(valid))
        for bound in (0.1, 0.5, 1.0):
            assert bound in LATENCY_BUCKETS_S
            key = ("diffvoice_turn_stage_seconds_bucket", (("le", str(bound)), ("stage", stage)))
            assert samples[key] == sum(v <= bound for v in valid)
    assert samples[("diffvoice_turn_stage_invalid_total", (("stage", "llm_ttft"),))] == 1
    assert samples[("diffvoice_turn_stage_invalid_total", (("stage", "server"),))] == 1


def test_sessions_errors_and_engine_gauges():
    metrics = VoiceMetrics()
    engine = _StatsOnly({"running": 3, "queued": 2, "last_batch_size": 3, "passes": 117,
                         "max_running": 8, "model": "x", "device": "cpu"})
    metrics.bind_engine(engine)
    for _ in range(3):
        metrics.session_opened()
    metrics.session_closed()
    metrics.observe_error("bad_audio")
    samples = _scrape(metrics)
    assert samples[("diffvoice_active_sessions", ())] == 2
    assert samples[("diffvoice_sessions_total", ())] == 3
    assert samples[("diffvoice_errors_total", (("code", "bad_audio"),))] == 1
    assert samples[("diffvoice_engine_up", ())] == 1
    assert samples[("diffvoice_engine_running_requests", ())] == 3
    assert samples[("diffvoice_engine_queue_depth", ())] == 2
    assert samples[("diffvoice_engine_batch_size", ())] == 3
    assert samples[("diffvoice_engine_passes_total", ())] == 117
    assert samples[("diffvoice_engine_max_running", ())] == 8
    assert ("diffvoice_engine_steps_total", ()) not in samples     # not in this engine's stats
    engine._stats = {"running": 0, "queued": 0, "last_batch_size": 1, "passes": 120}
    assert _scrape(metrics)[("diffvoice_engine_queue_depth", ())] == 0   # read at scrape time
    engine._stats = RuntimeError("engine thread died")
    samples = _scrape(metrics)                   # the scrape still works, and says so
    assert samples[("diffvoice_engine_up", ())] == 0
    assert ("diffvoice_engine_queue_depth", ()) not in samples


def test_two_instances_do_not_collide_and_close_never_goes_negative():
    first, second = VoiceMetrics(), VoiceMetrics()
    first.session_closed()
    second.session_opened()
    assert _scrape(first)[("diffvoice_active_sessions", ())] == 0
    assert _scrape(second)[("diffvoice_active_sessions", ())] == 1


def test_pocketsphinx_decoder_pool_gauges(monkeypatch):
    from types import SimpleNamespace

    from diffvoice.voice.asr.pocketsphinx_stt import DecoderPool

    monkeypatch.setattr(DecoderPool, "_new", lambda self: object())
    pool = DecoderPool(size=1, max_idle=1, max_total=4, idle_secs=0)
    held = [pool.acquire() for _ in range(3)]
    pool.release(held.pop())
    pool.release(held.pop())  # a second idle one: beyond max_idle, idle >= 0 s, discarded
    pool.waited = 2  # (set by voice.asr.pocketsphinx_stt.wait_for_idle)
    metrics = VoiceMetrics()
    metrics.observe_server(SimpleNamespace(asr=SimpleNamespace(model=pool)))
    text = metrics.render()[0].decode()
    got = {s.labels["state"]: s.value for f in text_string_to_metric_families(text)
           if f.name == "diffvoice_asr_decoders" for s in f.samples}
    assert got == {"in_use": 1.0, "idle": 1.0, "built": 3.0, "discarded": 1.0, "waited": 2.0}
