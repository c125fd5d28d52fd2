"""Request metrics of the OpenAI-compatible API, in vLLM's metric names where vLLM has one.

`api_metrics_for(registry) -> ApiMetrics` (one per registry, so mounting the router twice on one
registry never registers a family twice). The router calls:

    metrics.observe_status(handler, method, status)  # every response, by HTTP status class
    metrics.observe_finished(model_name, last_delta, error_code=None)  # a finished generation
    metrics.observe_error(code)                      # an OpenAI error code sent to a client

Families (seconds; label `model_name` as in vLLM):

    vllm:time_to_first_token_seconds      histogram  submit -> first committed block (TTFT)
    vllm:request_queue_time_seconds       histogram  submit -> admitted to an engine slot
    vllm:e2e_request_latency_seconds      histogram  submit -> last delta
    vllm:time_per_output_token_seconds    histogram  (e2e - TTFT) / (completion tokens - 1)
    vllm:request_success_total            counter    {finished_reason: stop | length}
    vllm:prompt_tokens_total              counter
    vllm:generation_tokens_total          counter
    diffvoice_api_output_tokens_per_second histogram completion tokens / e2e (vLLM has none)
    http_requests_total                   counter    {handler, method, status: 2xx | 4xx | 5xx}
                                                     (prometheus-fastapi-instrumentator's name
                                                     and grouping, which vLLM's server uses)
    diffvoice_api_errors_total            counter    {code: OpenAI error code}

Delta fields read: first_block_latency_s, queue_s, elapsed_s, prompt_tokens, completion_tokens,
finish_reason. Knows nothing about FastAPI or the engine beyond those fields.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from diffvoice.voice.metrics import LATENCY_BUCKETS_S

TOKENS_PER_SECOND_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0,
                             2000.0, 5000.0)
# per-token times are ~1-100 ms on CPU, well under a millisecond on a GPU
TPOT_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3,
                  0.4, 0.5, 0.75, 1.0, 2.5)

_BY_REGISTRY: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _seconds(value: Any) -> float | None:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
    return float(value) if ok else None


class ApiMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        labels = ["model_name"]
        self.ttft = Histogram("vllm:time_to_first_token_seconds",
                              "Time to first token: submit -> first committed block", labels,
                              buckets=LATENCY_BUCKETS_S, registry=registry)
        self.queue = Histogram("vllm:request_queue_time_seconds",
                               "Time a request waited for an engine slot", labels,
                               buckets=LATENCY_BUCKETS_S, registry=registry)
        self.e2e = Histogram("vllm:e2e_request_latency_seconds",
                             "End-to-end request latency: submit -> last token", labels,
                             buckets=LATENCY_BUCKETS_S, registry=registry)
        self.tpot = Histogram("vllm:time_per_output_token_seconds",
                              "Time per output token after the first block", labels,
                              buckets=TPOT_BUCKETS_S, registry=registry)
        self.tokens_per_s = Histogram("diffvoice_api_output_tokens_per_second",
                                      "Completion tokens per second of a request, submit to end",
                                      labels, buckets=TOKENS_PER_SECOND_BUCKETS,
                                      registry=registry)
        self.success = Counter("vllm:request_success", "Finished requests by finish reason",
                               ["model_name", "finished_reason"], registry=registry)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prompt tokens processed", labels,
                                     registry=registry)
        self.generation_tokens = Counter("vllm:generation_tokens", "Completion tokens generated",
                                         labels, registry=registry)
        self.http = Counter("http_requests", "API responses by handler, method and status class",
                            ["handler", "method", "status"], registry=registry)
        self.errors = Counter("diffvoice_api_errors", "OpenAI-shaped errors sent, by code",
                              ["code"], registry=registry)

    def observe_status(self, handler: str, method: str, status: int) -> None:
        self.http.labels(handler=handler, method=method, status=f"{int(status) // 100}xx").inc()

    def observe_error(self, code: str | None) -> None:
        self.errors.labels(code=str(code or "unknown")).inc()

    def observe_finished(self, model_name: str, last: Any) -> None:
        """A generation that ended normally (finish_reason stop or length)."""
        labels = {"model_name": model_name}
        ttft = _seconds(getattr(last, "first_block_latency_s", None))
        queue = _seconds(getattr(last, "queue_s", None))
        e2e = _seconds(getattr(last, "elapsed_s", None))
        tokens = int(getattr(last, "completion_tokens", 0) or 0)
        if ttft is not None:
            self.ttft.labels(**labels).observe(ttft)
        if queue is not None:
            self.queue.labels(**labels).observe(queue)
        if e2e is not None:
            self.e2e.labels(**labels).observe(e2e)
            if e2e > 0 and tokens:
                self.tokens_per_s.labels(**labels).observe(tokens / e2e)
            if ttft is not None and tokens > 1 and e2e >= ttft:
                self.tpot.labels(**labels).observe((e2e - ttft) / (tokens - 1))
        self.success.labels(model_name=model_name,
                            finished_reason=getattr(last, "finish_reason", None) or "stop").inc()
        self.prompt_tokens.labels(**labels).inc(int(getattr(last, "prompt_tokens", 0) or 0))
        self.generation_tokens.labels(**labels).inc(tokens)


def api_metrics_for(registry: CollectorRegistry | None) -> ApiMetrics:
    """The ApiMetrics registered on `registry` (created on first use); a private registry
    when None (metrics then go nowhere, which is what a bare router in a test wants)."""
    registry = registry if registry is not None else CollectorRegistry()
    with _LOCK:
        metrics = _BY_REGISTRY.get(registry)
        if metrics is None:
            metrics = _BY_REGISTRY[registry] = ApiMetrics(registry)
        return metrics
