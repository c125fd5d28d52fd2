"""The diffvoice server as a Ray Serve application: N replicas of the whole stack, one endpoint.

    app = build_application(config)   # bound Ray Serve Application: VoiceReplica x N
    run_ray(config) -> int            # `diffvoice serve --ray`: start/join Ray, run, block

Each replica (`VoiceReplica`) is one full diffvoice process: it loads and warms its own engine,
ASR and TTS (`voice.app.load_state`), warms the call path (`voice.warmup.warm_up`) before Serve
sends it anything, and serves exactly the app of `diffvoice serve`
(`voice.app.build_app`: /ws, Twilio, /v1, /healthz, /metrics, the page) through Serve's
ASGI ingress, plus `GET /metrics/cluster` (every live replica's series, see voice.scale.metrics).

Placement and admission:
- A call is one WebSocket, so it stays on the replica that accepted it for its whole life; new
  /ws, Twilio-stream and /v1 requests go to the replica with the fewest ongoing requests
  (`voice.scale.router.LeastLoadedRequestRouter`).
- Each replica keeps its own admission (`max_sessions` -> 1013, the engine's cap -> 503) and
  Serve's `max_ongoing_requests` is that capacity plus room for /v1 requests; Serve's own queue
  of not-yet-placed requests is bounded (4x a replica's capacity), beyond it Serve answers 503.
- Each replica posts to the metrics hub (voice.scale.metrics) every METRICS_POST_INTERVAL_S its
  series, its live calls (`active_sessions`) and the requests it is handling (`in_flight`: HTTP
  and WebSocket, from the app's call to its return, which is when Serve's router stops counting
  one ongoing), with the time of the count (`t`); `GET /replicas` shows them.
- Losing a replica ends only the calls it held; Serve's health check (`check_health`: the engine
  still answers) replaces it and new calls go to the live ones meanwhile.
- Twilio's webhook can be answered by any replica: the stream token is an HMAC of the CallSid
  under the Twilio auth token, so whichever replica receives the stream can check it.
- Start-up on a busy machine: Serve kills an HTTP proxy that is not ready within 5 s (then 10,
  15, ... s) and starts another, and `serve.start` fails if the one it waited on was killed.
  `start` tries again (`START_TRIES`) and returns only once the proxy answers on its port.

Knows nothing about pipecat or the engine's internals; needs the optional `ray` extra.
"""

from __future__ import annotations

import dataclasses
import threading
import time

from diffvoice.voice.config import ServeConfig

APP_NAME = "diffvoice"
DEPLOYMENT_NAME = "VoiceReplica"
METRICS_POST_INTERVAL_S = 2.0
# /v1 requests share a replica with its calls: room for this many in flight beyond max_sessions
API_HEADROOM = 16
START_TRIES = 4  # serve.start attempts while Serve replaces proxies that were slow to start
PROXY_WAIT_S = 180.0  # how long `start` waits for the HTTP proxy to answer after the app runs


class InFlight:
    """Requests an app is handling now, counted by `CountInFlight` around it."""

    def __init__(self) -> None:
        self.count = 0


class CountInFlight:
    """ASGI middleware (`app.add_middleware(CountInFlight, in_flight=...)`; pure ASGI, so a
    WebSocket counts too): a request counts from the app's call until it returns or raises;
    Serve's router hears that it completed only after that, and counts it ongoing till then."""

    def __init__(self, app, in_flight: InFlight) -> None:
        self.app = app
        self.in_flight = in_flight

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        self.in_flight.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.in_flight.count -= 1


class VoiceReplica:
    """One replica: engine + ASR + TTS + the FastAPI app, built once when Serve starts it."""

    async def __init__(self, config: dict) -> None:
        import asyncio

        import torch
        from ray import serve

        from diffvoice.voice.app import load_state
        from diffvoice.voice.scale.metrics import ReplicaMetrics, hub_actor
        from diffvoice.voice.warmup import warm_up

        self.config = ServeConfig(**config)
        context = serve.get_replica_context()
        self.replica_id = context.replica_id.unique_id
        torch.set_num_threads(max(1, int(self.config.cpus_per_replica)))
        # loading and warm-up run their own event loop: keep them off the replica's loop
        self.state = await asyncio.to_thread(
            load_state, self.config, replica_id=self.replica_id,
            metrics=ReplicaMetrics(self.replica_id),
        )
        # Serve routes requests to a replica as soon as this returns (it knows no /healthz):
        # warm the call path first, as `diffvoice serve` does before /healthz says ready, so no
        # first call waits for it (CI, 2026-12-07: a replica's first calls arrived while it was
        # still warming, and its first call took ~4 s to set up on 2 busy cores)
        await warm_up(self.state)
        self._hub = hub_actor()
        self._info = {"actor_name": _actor_name(), "pid": _pid()}
        self._in_flight = InFlight()
        self._stop = threading.Event()
        self._poster = threading.Thread(target=self._post_metrics, daemon=True,
                                        name="diffvoice-metrics-post")
        self._poster.start()

    def __serve_build_asgi_app__(self):
        from fastapi.responses import Response

        from diffvoice.voice.app import build_app
        from diffvoice.voice.scale.metrics import CONTENT_TYPE_LATEST, merge_expositions

        app = build_app(self.state)
        hub = self._hub
        replica_id = self.replica_id

        @app.middleware("http")
        async def tag_replica(request, call_next):
            response = await call_next(request)
            response.headers["x-diffvoice-replica"] = replica_id
            return response

        @app.get("/metrics/cluster")
        async def cluster_metrics() -> Response:
            snapshot = await hub.snapshot.remote()
            body = merge_expositions(entry["text"] for entry in snapshot.values())
            return Response(content=body, media_type=CONTENT_TYPE_LATEST)

        @app.get("/replicas")
        async def replicas() -> dict:
            snapshot = await hub.snapshot.remote()
            return {rid: {k: v for k, v in e.items() if k != "text"} for rid, e in snapshot.items()}

        app.add_middleware(CountInFlight, in_flight=self._in_flight)  # around the app's own
        return app

    def check_health(self) -> None:
        """Serve calls this every few seconds; raising makes Serve replace the replica."""
        stats = self.state.engine.stats()
        if not stats:
            raise RuntimeError("engine stats are empty: the engine is not running")

    def _post_metrics(self) -> None:
        while not self._stop.is_set():
            try:
                body, _ = self.state.metrics.render()
                info = {**self._info, "active_sessions": len(self.state.active_sessions),
                        "in_flight": self._in_flight.count, "t": time.time()}
                self._hub.post.remote(self.replica_id, body.decode(), info)
            except Exception:  # the hub is best effort: never take the replica down
                pass
            self._stop.wait(METRICS_POST_INTERVAL_S)

    def __del__(self) -> None:
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
        try:
            self._hub.drop.remote(self.replica_id)
        except Exception:
            pass
        state = getattr(self, "state", None)
        if state is not None and state.engine is not None:
            state.engine.close()


def _actor_name() -> str | None:
    import ray

    try:
        return ray.get_runtime_context().get_actor_name()
    except Exception:
        return None


def _pid() -> int:
    import os

    return os.getpid()


def deployment_options(config: ServeConfig) -> dict:
    """Serve deployment options for this config (separate so tests and docs can read them)."""
    from ray.serve.config import RequestRouterConfig

    options: dict = {
        "name": DEPLOYMENT_NAME,
        "ray_actor_options": {
            "num_cpus": config.cpus_per_replica,
            "num_gpus": config.gpus_per_replica,
        },
        "max_ongoing_requests": config.max_sessions + API_HEADROOM,
        # requests wait here while Serve picks a replica (a burst of new calls, a probe under
        # load); each replica refuses what it cannot take itself (1013 / 503), so this bound
        # only stops an unbounded backlog, it is not the admission limit
        "max_queued_requests": 4 * (config.max_sessions + API_HEADROOM),
        "request_router_config": RequestRouterConfig(
            request_router_class="diffvoice.voice.scale.router:LeastLoadedRequestRouter"
        ),
        "health_check_period_s": 5.0,
        "health_check_timeout_s": 30.0,
        "graceful_shutdown_timeout_s": 10.0,
    }
    if config.max_replicas is not None and config.max_replicas > config.replicas:
        # one replica per `max_sessions/2` ongoing calls, within [replicas, max_replicas]
        options["autoscaling_config"] = {
            "min_replicas": config.replicas,
            "initial_replicas": config.replicas,
            "max_replicas": config.max_replicas,
            "target_ongoing_requests": max(1, config.max_sessions // 2),
        }
    else:
        options["num_replicas"] = config.replicas
    return options


def build_application(config: ServeConfig):
    from ray import serve

    cls = serve.ingress()(VoiceReplica)
    deployment = serve.deployment(cls).options(**deployment_options(config))
    return deployment.bind(dataclasses.asdict(config))


def start(config: ServeConfig):
    """Start (or join) Ray, start Serve's HTTP proxy on config.host:port, run the app."""
    import ray
    from ray import serve

    if not ray.is_initialized():
        ray.init(address=config.ray_address, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)
    for attempt in range(1, START_TRIES + 1):
        try:
            serve.start(http_options={"host": config.host, "port": config.port})
            break
        except (ray.exceptions.RayActorError, TimeoutError) as e:
            if attempt == START_TRIES:
                raise
            from loguru import logger

            logger.warning(f"Ray Serve's HTTP proxy did not start ({type(e).__name__}); "
                           f"Serve starts another (try {attempt + 1} of {START_TRIES})")
    handle = serve.run(build_application(config), name=APP_NAME, route_prefix="/")
    wait_for_proxy(config.host, config.port, PROXY_WAIT_S)
    return handle


def wait_for_proxy(host: str, port: int, timeout_s: float) -> None:
    """Until Serve's HTTP proxy on host:port answers its own health route (`/-/healthz`);
    TimeoutError after `timeout_s`."""
    import urllib.error
    import urllib.request

    host = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}.get(host, host).strip("[]")
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}/-/healthz"
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() >= deadline:
            raise TimeoutError(f"Ray Serve's HTTP proxy on {host}:{port} did not answer "
                               f"{url} within {timeout_s:.0f} s")
        time.sleep(0.5)


def run_ray(config: ServeConfig) -> int:
    from loguru import logger

    try:
        import ray  # noqa: F401
        from ray import serve
    except ImportError:
        logger.error('--ray needs Ray Serve: pip install "diffvoice[ray]"')
        return 2
    import signal

    def _stop(signum, frame):  # SIGTERM (systemd, docker stop, kill) shuts Serve down cleanly
        raise KeyboardInterrupt

    started = time.perf_counter()
    try:
        start(config)
        signal.signal(signal.SIGTERM, _stop)  # after ray.init, which installs its own handler
        logger.info(
            f"Ray Serve: {config.replicas} replica(s) of diffvoice up in "
            f"{time.perf_counter() - started:.1f}s; serving at http://{config.host}:{config.port}/"
            " (cluster metrics at /metrics/cluster)"
        )
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        return 0
    except Exception as e:
        logger.error(f"Ray Serve failed: {e!r}")
        return 2
    finally:
        try:
            serve.shutdown()
        except Exception:
            pass
