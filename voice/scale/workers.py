"""`diffvoice serve --workers N`: N server processes on one listening socket, one machine.

One server process does every call's audio plumbing on one event-loop thread under one
interpreter lock; on the project's 2-core CPU that thread is full at about 16 callers
(docs/reliability.md) while the machine as a whole is not (1.4 of 2 cores busy with 32 callers
on one process). `--workers N` runs N whole servers (engine + ASR + TTS + calls each, like a
Ray Serve replica, docs/scaling.md) that accept from the same socket: the kernel hands each new
connection to whichever worker calls accept() first. There is no proxy in the audio path.

Contract:
- `run_workers(config) -> int` (what `diffvoice serve` runs when config.workers > 1): binds
  config.host:config.port once in the supervisor, plus one private loopback socket per worker;
  starts N spawned processes (`_worker_main`), which load their state and wait for each other
  before any accepts, so no worker gets every early call; restarts a worker that dies (its calls
  end, its admission slots are released); on SIGTERM / SIGINT stops them all (SIGTERM, then
  SIGKILL after 20 s) and exits 0.
- `SharedAdmission(workers, per_ip_limit)`: counters in shared memory, built by the supervisor and
  handed to every worker. `for_worker(k)` -> `WorkerAdmission`, which is both the per-IP slot
  table of voice.call_limits.ClientSlots (`acquire(ip)` / `release(ip)` / `held()` (this
  worker's) / `limit`) across every worker, and the session count behind
  `AppState.sessions_open()` (`sessions_open()`: every worker's sessions). So --max-sessions
  and --max-sessions-per-ip hold for the whole server, as with one process.
- `SharedSessions(admission)`: the `AppState.active_sessions` set of a worker; add/discard also
  update its count in shared memory.
- Every worker labels its series and records `replica="worker-<k>"` (voice.scale.metrics);
  `/metrics` is the worker that answered; `GET /metrics/cluster` merges every live worker's
  (fetched from their private sockets; same credentials as /metrics); `GET /workers` lists them.
- /ws session tokens (voice.access.SessionTokens) are signed with one secret for all workers.
  Twilio's stream token is an HMAC under the auth token, so any worker can take a webhook's
  stream; its single use (one stream per CallSid) and the phone-call cap are held across every
  worker by `SharedAdmission.phone` (voice.scale.phone_calls), set as `state.phone_admission`.
"""

from __future__ import annotations

import hashlib
import multiprocessing as mp
import os
import secrets
import signal
import socket
import sys
import time
import urllib.request
from dataclasses import asdict
from typing import Any

from fastapi import Request  # a module-level name: FastAPI resolves the routes' annotations

from diffvoice.voice.scale.phone_calls import SharedPhoneCalls

SLOTS = 1024  # per-IP table entries per worker (a worker holds at most max_sessions)
_EMPTY = 0


def _ip_key(ip: str) -> int:
    key = int.from_bytes(hashlib.blake2b(ip.encode(), digest_size=8).digest(), "little",
                         signed=True)
    return key or 1  # 0 marks an empty entry


class SharedAdmission:
    """Session and per-IP counters of every worker, in shared memory (picklable to a spawned
    worker as a Process argument). Entry (k, i) of the per-IP table is worker k's count for one
    IP: a worker only writes its own row, every worker reads all rows, under one lock."""

    def __init__(self, workers: int, per_ip_limit: int, ctx=None) -> None:
        if workers < 1 or per_ip_limit < 1:
            raise ValueError(f"workers and per_ip_limit must be >= 1, got {workers}, "
                             f"{per_ip_limit}")
        ctx = ctx or mp.get_context("spawn")
        self.workers = workers
        self.per_ip_limit = per_ip_limit
        self._lock = ctx.Lock()
        self._sessions = ctx.RawArray("i", workers)
        self._keys = ctx.RawArray("q", workers * SLOTS)
        self._counts = ctx.RawArray("i", workers * SLOTS)
        self.phone = SharedPhoneCalls(workers, ctx)  # Twilio stream claims + phone-call cap

    def for_worker(self, k: int) -> WorkerAdmission:
        if not 0 <= k < self.workers:
            raise ValueError(f"worker {k} not in 0..{self.workers - 1}")
        return WorkerAdmission(self, k)

    def reset(self, k: int) -> None:
        """Forget worker k's sessions and slots (it died; its calls are gone)."""
        self.phone.reset(k)
        with self._lock:
            self._sessions[k] = 0
            for i in range(k * SLOTS, (k + 1) * SLOTS):
                self._keys[i] = _EMPTY
                self._counts[i] = 0

    # --- under self._lock ---
    def _held_by_all(self, key: int) -> int:
        total = 0
        for k in range(self.workers):
            i = self._find(k, key)
            if i is not None:
                total += self._counts[i]
        return total

    def _find(self, k: int, key: int) -> int | None:
        base, start = k * SLOTS, key % SLOTS
        for step in range(SLOTS):
            i = base + (start + step) % SLOTS
            if self._keys[i] == key:
                return i
            if self._keys[i] == _EMPTY:
                return None
        return None

    def _insert_at(self, k: int, key: int) -> int | None:
        """The entry for `key` in worker k's row: its own if present, else the first entry of
        its probe chain whose count is 0 (an IP that holds nothing: reused, so the row never
        fills with IPs long gone), else the empty entry that ends the chain."""
        base, start = k * SLOTS, key % SLOTS
        reusable = None
        for step in range(SLOTS):
            i = base + (start + step) % SLOTS
            if self._keys[i] == key:
                return i
            if self._keys[i] == _EMPTY:
                break
            if reusable is None and self._counts[i] == 0:
                reusable = i
        else:
            i = None
        if reusable is not None:
            i = reusable
        if i is not None:
            self._keys[i] = key
        return i


class WorkerAdmission:
    """One worker's view of SharedAdmission: a ClientSlots over every worker, plus sessions."""

    def __init__(self, shared: SharedAdmission, k: int) -> None:
        self._shared, self.worker = shared, k
        self.limit = shared.per_ip_limit

    def acquire(self, ip: str) -> bool:
        s, key = self._shared, _ip_key(ip)
        with s._lock:
            if s._held_by_all(key) >= self.limit:
                return False
            i = s._find(self.worker, key)
            if i is None:
                i = s._insert_at(self.worker, key)
                if i is None:  # this worker's table is full: refuse rather than lose count
                    return False
            s._counts[i] += 1
            return True

    def release(self, ip: str) -> None:
        s, key = self._shared, _ip_key(ip)
        with s._lock:
            i = s._find(self.worker, key)
            if i is None:
                return
            s._counts[i] = max(0, s._counts[i] - 1)
            # the entry stays (a probe chain must not break); at count 0 any IP may reuse it

    def held(self) -> int:
        s, base = self._shared, self.worker * SLOTS
        with s._lock:
            return sum(s._counts[base:base + SLOTS])

    def set_sessions(self, n: int) -> None:
        with self._shared._lock:
            self._shared._sessions[self.worker] = n

    def sessions_open(self) -> int:
        with self._shared._lock:
            return sum(self._shared._sessions)


class SharedSessions(set):
    """AppState.active_sessions of one worker: a set whose size is published for the others."""

    def __init__(self, admission: WorkerAdmission) -> None:
        super().__init__()
        self._admission = admission
        admission.set_sessions(0)

    def add(self, item) -> None:
        super().add(item)
        self._admission.set_sessions(len(self))

    def discard(self, item) -> None:
        super().discard(item)
        self._admission.set_sessions(len(self))

    def remove(self, item) -> None:
        super().remove(item)
        self._admission.set_sessions(len(self))


# ------------------------------------------------------------------------------------------
# the supervisor and its workers


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.set_inheritable(True)
    return sock


def _die_with_parent(parent: int) -> None:
    """Linux: SIGTERM this worker when the supervisor dies, even by SIGKILL (no orphans)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # it died before the call above
        os.kill(os.getpid(), signal.SIGTERM)


def _worker_main(config_fields: dict, k: int, listen: socket.socket, private: socket.socket,
                 peers: list[int], admission: SharedAdmission, ready, secret: bytes,
                 parent: int) -> None:
    _die_with_parent(parent)
    from diffvoice.voice.app import configure_logging

    configure_logging(config_fields.pop("_log_level", "INFO"))
    from loguru import logger

    from diffvoice.voice.config import ServeConfig

    config = ServeConfig(**config_fields)
    code = serve_worker(config, k, listen, private, peers, admission, ready, secret)
    logger.info(f"worker {k}: exited ({code})")
    sys.exit(code)


def serve_worker(config, k: int, listen: socket.socket, private: socket.socket,
                 peers: list[int], admission: SharedAdmission, ready, secret: bytes) -> int:
    """One worker: load, wait for the others (`ready`, None for a restarted worker), serve."""
    import threading

    import torch
    import uvicorn
    from loguru import logger

    from diffvoice.voice import malloc_tune
    from diffvoice.voice.access import SessionTokens
    from diffvoice.voice.app import StartupError, build_app, load_state
    from diffvoice.voice.scale.metrics import ReplicaMetrics
    from diffvoice.voice.telephony.admission import claim_retention_s, phone_call_limit

    if config.malloc_arena_max:
        malloc_tune.limit_arenas(config.malloc_arena_max)
    if config.switch_interval_ms:
        sys.setswitchinterval(config.switch_interval_ms / 1000.0)
    # the workers share the machine's cores: N workers x all-core torch pools oversubscribe them
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // config.workers))
    worker_id = f"worker-{k}"
    try:
        state = load_state(config, replica_id=worker_id, metrics=ReplicaMetrics(worker_id))
    except StartupError as e:
        logger.error(f"{worker_id}: {e}")
        return 2
    view = admission.for_worker(k)
    state.client_slots = view
    state.active_sessions = SharedSessions(view)
    state.session_tokens = SessionTokens(secret)
    state.shared_admission = view
    state.phone_admission = admission.phone.for_worker(
        k, phone_call_limit(config), claim_retention_s(config))
    app = build_app(state)
    _mount_cluster_routes(app, state, peers, k)
    if ready is not None:
        try:
            ready.wait(timeout=600)  # every worker loaded: then all start accepting at once
        except threading.BrokenBarrierError:
            logger.error(f"{worker_id}: another worker failed to start")
            state.engine.close()
            return 2
    logger.info(f"{worker_id} (pid {os.getpid()}): accepting")
    from diffvoice.voice.http_limits import uvicorn_options

    server = uvicorn.Server(uvicorn.Config(app, **uvicorn_options(config)))
    try:
        server.run(sockets=[listen, private])
    finally:
        state.engine.close()
    return 0


def _mount_cluster_routes(app, state, peers: list[int], k: int) -> None:
    import asyncio

    from fastapi.responses import Response

    from diffvoice.voice.scale.metrics import CONTENT_TYPE_LATEST, merge_expositions

    def fetch(port: int, path: str, auth: str | None) -> bytes | None:
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
        if auth:
            request.add_header("Authorization", auth)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.read()
        except OSError:
            return None  # a worker that is restarting is left out

    @app.get("/metrics/cluster")
    async def cluster_metrics(request: Request) -> Response:
        auth = request.headers.get("authorization")
        texts = await asyncio.gather(*(asyncio.to_thread(fetch, p, "/metrics", auth)
                                       for p in peers))
        if texts[k] is None:  # this worker's own answer is the credential check
            own = await asyncio.to_thread(fetch, peers[k], "/metrics", auth)
            if own is None:
                return Response("metrics need 'Authorization: Bearer <API key>'\n",
                                status_code=401, media_type="text/plain")
        body = merge_expositions(t.decode() for t in texts if t is not None)
        return Response(content=body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/workers")
    async def workers() -> dict:
        return {"workers": len(peers), "answered_by": state.replica_id, "pid": os.getpid(),
                "sessions_open": state.sessions_open()}


def run_workers(config, log_level: str = "INFO") -> int:
    from loguru import logger

    n = config.workers
    ctx = mp.get_context("spawn")
    try:
        listen = _bind(config.host, config.port)
    except OSError as e:
        logger.error(f"cannot listen on {config.host}:{config.port}: {e}")
        return 2
    listen.listen(2048)
    private = [_bind("127.0.0.1", 0) for _ in range(n)]
    for sock in private:
        sock.listen(64)
    peers = [s.getsockname()[1] for s in private]
    admission = SharedAdmission(n, config.max_sessions_per_ip, ctx)
    secret = secrets.token_bytes(32)
    ready = ctx.Barrier(n)
    fields = {**asdict(config), "_log_level": log_level}

    def start(k: int, barrier) -> Any:
        process = ctx.Process(target=_worker_main, name=f"diffvoice-worker-{k}", args=(
            dict(fields), k, listen, private[k], peers, admission, barrier, secret,
            os.getpid()))
        process.start()
        return process

    stopping = False

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    logger.info(f"serving with {n} workers at http://{config.host}:{config.port}/ "
                f"(private ports {peers})")
    procs = [start(k, ready) for k in range(n)]
    started = [time.monotonic()] * n
    while not stopping:
        time.sleep(0.5)
        for k, process in enumerate(procs):
            if process.is_alive() or stopping:
                continue
            code = process.exitcode
            admission.reset(k)
            if code == 2 and time.monotonic() - started[k] < 600:
                logger.error(f"worker {k} could not start (exit 2): stopping")
                ready.abort()  # the others stop waiting for it
                stopping = True
                break
            logger.error(f"worker {k} (pid {process.pid}) exited with {code}: restarting it")
            procs[k], started[k] = start(k, None), time.monotonic()
    for process in procs:
        if process.is_alive():
            process.terminate()
    deadline = time.monotonic() + 20
    for process in procs:
        process.join(max(0.1, deadline - time.monotonic()))
        if process.is_alive():
            process.kill()
            process.join(10)
    return 0
