"""Prometheus metrics for the voice server: per-stage turn latency, sessions, engine load.

Contract (the server calls exactly these; all are thread-safe and never raise on bad records):

    metrics = VoiceMetrics(registry=None)   # None: a private CollectorRegistry (so several apps
                                            # in one process never collide); pass REGISTRY to
                                            # share the process-global one
    metrics.observe_turn(record)            # one latency record (see below) per user turn
    metrics.session_opened(); metrics.session_closed()
    metrics.observe_error(code)             # optional: an "error" event sent to a client
    metrics.bind_engine(engine)             # engine.stats() is read once per scrape
    body, content_type = metrics.render()   # for GET /metrics

Exported families (seconds, the Prometheus base unit; stage names match latency_bench reports
without the `_ms` suffix; the /v1 API's request metrics are voice/openai_api/metrics.py's):

    diffvoice_turn_stage_seconds{stage=...}   histogram; stage in endpointing, asr, llm_ttft,
                                              tts_first_audio, server. No voice_to_voice: the
                                              server never hears the caller's ear (it starts
                                              before the server sees speech end and ends after
                                              playout), so only the load generator
                                              (latency_bench) measures it.
    diffvoice_turns_total                     counter: latency records observed
    diffvoice_turns_interrupted_total         counter: records with "interrupted": true (barge-in)
    diffvoice_turn_stage_invalid_total{stage} counter: stage values that were negative or not
                                              numbers (skipped, but counted, never silently lost)
    diffvoice_sessions_total                  counter: sessions opened
    diffvoice_active_sessions                 gauge
    diffvoice_errors_total{code}              counter
    diffvoice_engine_running_requests         gauge  (engine.stats()["running"])
    diffvoice_engine_queue_depth              gauge  (engine.stats()["queued"])
    diffvoice_engine_batch_size               gauge  (engine.stats()["last_batch_size"])
    diffvoice_engine_max_running              gauge  (engine.stats()["max_running"])
    diffvoice_engine_passes_total             counter (engine.stats()["passes"])
    diffvoice_engine_steps_total              counter (engine.stats()["steps"])
    diffvoice_engine_up                       gauge: 1 if the last stats() call worked, else 0
    diffvoice_engine_isolated_passes_total    counter (a failed batched pass re-run row by row)
    diffvoice_engine_worker_prepare_max_ms    gauge  (longest preparation on the worker thread)
    diffvoice_engine_callers / _generators / _free_slots   gauges (leak checks: requests with a
                                              caller, sampling generators, free KV slots)
    diffvoice_event_loop_tasks                gauge: asyncio tasks on the server loop
    diffvoice_client_slots_held               gauge: per-IP /ws slots held
    diffvoice_active_session_ids              gauge: sessions registered in AppState
    diffvoice_event_loop_lag_seconds{stat}    gauge: how late the event loop woke a 50 ms
                                              timer since the previous scrape ("max", "mean";
                                              voice.loop_lag): every call waits that long
    diffvoice_asr_decoders{state}             gauge: pocketsphinx decoders alive ("in_use",
                                              "idle") and built / discarded since start
                                              ("built", "discarded"; a build holds the
                                              interpreter lock ~0.5 s: voice.asr.pocketsphinx_stt)
                                              and segments that waited for a busy one
                                              instead of building ("waited")
    process_resident_memory_bytes, process_open_fds, ...   prometheus_client's ProcessCollector
    (the three server gauges are refreshed by `observe_server(state)`, which GET /metrics calls)
    (an engine field missing from stats() is simply not exported)

A record is the per-turn dict of the latency contract: `<stage>_ms` fields in milliseconds
(missing or None fields are simply not observed). This module knows nothing about pipecat,
sockets or FastAPI.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

STAGES: tuple[str, ...] = ("endpointing", "asr", "llm_ttft", "tts_first_audio", "server")

# Seconds. Dense from 10 ms to 1.5 s where voice turns live, sparse up to 30 s for CPU tails.
LATENCY_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5,
    2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0,
)

# engine.stats() key -> (family name, help, kind)
_ENGINE_FIELDS: tuple[tuple[str, str, str, str], ...] = (
    ("running", "diffvoice_engine_running_requests", "Requests the engine is decoding now",
     "gauge"),
    ("queued", "diffvoice_engine_queue_depth", "Requests waiting for an engine slot", "gauge"),
    ("last_batch_size", "diffvoice_engine_batch_size", "Rows in the engine's last decoding step",
     "gauge"),
    ("max_running", "diffvoice_engine_max_running", "Engine slots (requests decoded at once)",
     "gauge"),
    ("passes", "diffvoice_engine_passes", "Denoising forward passes the engine has run",
     "counter"),
    ("steps", "diffvoice_engine_steps", "Decoding steps the engine has run", "counter"),
    ("callers", "diffvoice_engine_callers", "Engine requests with a caller still attached",
     "gauge"),
    ("generators", "diffvoice_engine_generators", "Per-slot sampling generators held", "gauge"),
    ("free_slots", "diffvoice_engine_free_slots", "Engine slots free now", "gauge"),
    ("isolated_passes", "diffvoice_engine_isolated_passes",
     "Batched passes that failed and were re-run row by row (one request's fault)", "counter"),
    ("worker_prepare_max_ms", "diffvoice_engine_worker_prepare_max_ms",
     "Longest one request's preparation held the engine's worker thread (ms)", "gauge"),
)


class _EngineCollector(Collector):
    """Reads engine.stats() once per scrape and turns the known fields into families."""

    def __init__(self) -> None:
        self.engine: Any = None

    def collect(self) -> Iterator[Metric]:
        engine = self.engine
        if engine is None:
            return
        up = GaugeMetricFamily("diffvoice_engine_up",
                               "1 if the engine answered stats() at this scrape, else 0")
        try:
            stats = dict(engine.stats())
        except Exception:   # a scrape must never take the server down; say so in the gauge
            log.exception("engine.stats() failed during a /metrics scrape")
            up.add_metric([], 0.0)
            yield up
            return
        up.add_metric([], 1.0)
        yield up
        for key, name, help_text, kind in _ENGINE_FIELDS:
            value = stats.get(key)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            family_type = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family_type(name, help_text, value=float(value))

    def describe(self) -> Iterator[Metric]:
        return iter(())   # dynamic: do not let the registry call collect() at registration


class VoiceMetrics:
    """The voice server's metrics registry (see the module docstring for the contract)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._stage_seconds = Histogram(
            "diffvoice_turn_stage_seconds", "Per-turn latency of one voice pipeline stage",
            ["stage"], buckets=LATENCY_BUCKETS_S, registry=self.registry)
        self._invalid = Counter(
            "diffvoice_turn_stage_invalid", "Stage values skipped because they were negative "
            "or not numbers", ["stage"], registry=self.registry)
        self._turns = Counter("diffvoice_turns", "Latency records observed",
                              registry=self.registry)
        self._interrupted = Counter("diffvoice_turns_interrupted",
                                    "Bot turns the caller interrupted (barge-in)",
                                    registry=self.registry)
        self._sessions = Counter("diffvoice_sessions", "Voice sessions opened",
                                 registry=self.registry)
        self._active = Gauge("diffvoice_active_sessions", "Voice sessions open now",
                             registry=self.registry)
        self._errors = Counter("diffvoice_errors", "Error events sent to clients", ["code"],
                               registry=self.registry)
        for stage in STAGES:   # export every stage from the start, even before the first turn
            self._stage_seconds.labels(stage=stage)
        self._tasks = Gauge("diffvoice_event_loop_tasks",
                            "asyncio tasks alive on the server event loop",
                            registry=self.registry)
        self._client_slots = Gauge("diffvoice_client_slots_held",
                                   "Per-IP /ws session slots held", registry=self.registry)
        self._loop_lag = Gauge("diffvoice_event_loop_lag_seconds",
                               "Event-loop timer lateness since the previous scrape",
                               ["stat"], registry=self.registry)
        self._decoders = Gauge("diffvoice_asr_decoders",
                               "pocketsphinx decoders: in_use / idle now, built / discarded since "
                               "start", ["state"], registry=self.registry)
        self._session_ids = Gauge("diffvoice_active_session_ids",
                                  "Session ids registered as active (browser + Twilio)",
                                  registry=self.registry)
        ProcessCollector(registry=self.registry)  # process_resident_memory_bytes, _open_fds
        self._lock = threading.Lock()
        self._open_sessions = 0
        self._engine_collector = _EngineCollector()
        self.registry.register(self._engine_collector)

    def observe_turn(self, record: Mapping[str, Any]) -> None:
        self._turns.inc()
        if record.get("interrupted") is True:
            self._interrupted.inc()
        for stage in STAGES:
            value = record.get(f"{stage}_ms")
            if value is None:
                continue
            if (not isinstance(value, int | float) or isinstance(value, bool)
                    or not math.isfinite(value) or value < 0):
                self._invalid.labels(stage=stage).inc()
                continue
            self._stage_seconds.labels(stage=stage).observe(value / 1000.0)

    def session_opened(self) -> None:
        with self._lock:
            self._open_sessions += 1
            self._active.set(self._open_sessions)
        self._sessions.inc()

    def session_closed(self) -> None:
        with self._lock:
            self._open_sessions = max(0, self._open_sessions - 1)
            self._active.set(self._open_sessions)

    def observe_error(self, code: str) -> None:
        self._errors.labels(code=str(code)).inc()

    def observe_server(self, state: Any) -> None:
        """Refresh the leak gauges from the server (call on the event loop, before render)."""
        try:
            self._tasks.set(len(asyncio.all_tasks()))
        except RuntimeError:  # no running loop (a test calling render directly)
            pass
        slots = getattr(state, "client_slots", None)
        if slots is not None:
            self._client_slots.set(slots.held())
        sessions = getattr(state, "active_sessions", None)
        if sessions is not None:
            self._session_ids.set(len(sessions))
        lag = getattr(state, "loop_lag", None)
        if lag is not None:
            worst, mean = lag.take()
            self._loop_lag.labels(stat="max").set(worst)
            self._loop_lag.labels(stat="mean").set(mean)
        pool = getattr(getattr(state, "asr", None), "model", None)
        if all(hasattr(pool, k) for k in ("total", "idle", "created", "discarded")):
            idle = pool.idle
            for label, value in (("in_use", pool.total - idle), ("idle", idle),
                                 ("built", pool.created), ("discarded", pool.discarded),
                                 ("waited", getattr(pool, "waited", 0))):
                self._decoders.labels(state=label).set(value)

    def bind_engine(self, engine: Any) -> None:
        self._engine_collector.engine = engine

    def render(self) -> tuple[bytes, str]:
        return generate_latest(self.registry), CONTENT_TYPE_LATEST
