"""Two Ray Serve replicas of the whole stack on this machine (voice.scale.ray_serve).

Real parts: a local Ray cluster, Serve's HTTP proxy on a loopback port, two replicas each with
the shipped receptionist model, pocketsphinx and espeak-ng, spoken calls over the browser
protocol and /v1 requests with the openai client. One module-scoped cluster serves all tests.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="Ray Serve is the optional `ray` extra")
serve = pytest.importorskip("ray.serve")

from voice_client import connect, send_pcm  # noqa: E402
from voice_fixtures import scaled  # noqa: E402

from diffvoice.voice.transport import protocol  # noqa: E402

# serial: two replicas, Ray's control plane and real-time callers need this 2-core machine to
# themselves; beside three other test workers the replicas fell behind their callers' audio
# (a call closed idle, a replica's calls unanswered), so `make test` runs this module alone
pytestmark = [pytest.mark.slow, pytest.mark.serial]

REPO = Path(__file__).resolve().parents[3]
MODEL = REPO / "models" / "receptionist-tiny"
QUESTION = "what time do you open on saturday"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    if not MODEL.is_dir():
        pytest.skip("the shipped model is missing")
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.scale.ray_serve import start

    port = _free_port()
    config = ServeConfig(host="127.0.0.1", port=port, model=str(MODEL), asr="pocketsphinx",
                         device="cpu", replicas=2, cpus_per_replica=1.0, max_sessions=8,
                         stop_secs=0.4)  # fmt: skip
    # replicas import this checkout (not whatever an editable install points at)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO)}})  # fmt: skip
    try:
        start(config)
        yield f"127.0.0.1:{port}"
    finally:
        serve.shutdown()
        ray.shutdown()


async def _replicas():
    from diffvoice.voice.scale.metrics import HUB_NAME, HUB_NAMESPACE

    hub = ray.get_actor(HUB_NAME, namespace=HUB_NAMESPACE)
    deadline = time.monotonic() + scaled(30)
    while True:
        snap = await hub.snapshot.remote()
        if len(snap) >= 2 or time.monotonic() > deadline:
            return snap
        await asyncio.sleep(0.5)


async def _until_idle():
    """Until both replicas have said, in a count taken after this began, that they handle no
    request (voice.scale.ray_serve's `in_flight`). Least-loaded placement ranks replicas by their
    ongoing requests, and an earlier test's calls end on their replica seconds after the caller
    hung up (one whose answer was still playing takes ~5 s: the pipeline's cancel). Requests
    still ongoing on the two replicas just before test_losing_a_replica placed its calls,
    2026-12-08 (the router's counts, then the replicas'): 2 and 0 (it placed 3 + 1), 4 and 3,
    2 and 2; in a loaded `make test` all four calls went to one replica. A test that expects its
    calls spread evenly starts from idle replicas."""
    from diffvoice.voice.scale.metrics import HUB_NAME, HUB_NAMESPACE

    hub = ray.get_actor(HUB_NAME, namespace=HUB_NAMESPACE)
    since = time.time()
    deadline = time.monotonic() + scaled(60)
    while True:
        snap = await hub.snapshot.remote()
        idle = [r for r, e in snap.items() if e.get("t", 0) >= since and e.get("in_flight") == 0]
        if len(idle) >= 2:
            return
        assert time.monotonic() < deadline, {r: (e.get("in_flight"), e["age_s"])
                                             for r, e in snap.items()}  # fmt: skip
        await asyncio.sleep(0.25)


def _answered(call) -> bool:
    """The answer's text, its audio and the turn's latency record all reached us."""
    return call.audio_frames > 0 and call.has(protocol.BotText) and call.has(protocol.Latency)


async def _wait_for(predicate, step=0.05):
    while not predicate():  # noqa: ASYNC110 (polls state the reader task fills in)
        await asyncio.sleep(step)


async def _call(url, pcm, *, delay=0.0, answered=None, hang_up=None):
    """One caller asks one question and waits for the spoken answer. With `hang_up`, the call
    then stays connected (appending itself to `answered`) until hang_up is set or the server
    ends it. No session.start: defaults, as a minimal client would."""
    await asyncio.sleep(delay)
    async with connect(f"ws://{url}/ws") as (ws, call, done):
        await send_pcm(ws, pcm, speed=1.0)  # real time, as a caller speaks
        with contextlib.suppress(TimeoutError):  # the caller's assertions say what was missing
            await asyncio.wait_for(_wait_for(lambda: _answered(call) or done.is_set()),
                                   scaled(120))  # fmt: skip
        if not _answered(call):
            return call
        if hang_up is not None and not done.is_set():
            answered.append(call)
            waits = {asyncio.create_task(hang_up.wait()), asyncio.create_task(done.wait())}
            _, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
    return call


async def test_replicas_are_warm_when_serve_reports_the_app_ready(cluster):
    """Serve sends requests to a replica once it has started; it has no /healthz to wait on. The
    replica warms the call path before it starts (voice.warmup), so the very first requests,
    sent the moment the app is ready, find both replicas warm."""
    import aiohttp

    async with aiohttp.ClientSession(f"http://{cluster}") as client:

        async def health():
            async with client.get("/healthz") as r:
                return r.status, r.headers.get("x-diffvoice-replica"), await r.json()

        answers = await asyncio.gather(*(health() for _ in range(8)))
    assert all(status == 200 and body["status"] == "ok" for status, _, body in answers), answers
    assert len({replica for _, replica, _ in answers}) == 2, answers


async def test_calls_spread_over_both_replicas_and_get_answers(cluster, speech):
    pcm = speech(QUESTION)
    await _until_idle()
    answered, hang_up = [], asyncio.Event()
    tasks = [asyncio.create_task(_call(cluster, pcm, delay=0.4 * i, answered=answered,
                                       hang_up=hang_up)) for i in range(8)]  # fmt: skip
    # every call stays open until all eight are answered, so each placement sees the others
    await asyncio.wait_for(_wait_for(lambda: len(answered) == 8 or any(t.done() for t in tasks)),
                           scaled(180))  # fmt: skip
    hang_up.set()
    calls = await asyncio.gather(*tasks)
    assert all(_answered(c) for c in calls), [(c.events, c.audio_frames) for c in calls
                                              if not _answered(c)]  # fmt: skip
    per_replica = collections.Counter(c.started.replica for c in calls)
    assert len(per_replica) == 2, per_replica
    assert min(per_replica.values()) >= 3, per_replica  # least-loaded placement: 4 + 4 or close
    for call in calls:
        for record in call.of(protocol.Latency):
            assert record.replica == call.started.replica  # records carry their replica


async def test_v1_requests_are_spread(cluster):
    import aiohttp

    # 48 tokens each (ignore_eos): long enough that 12 at once overlap on the replicas; with
    # 16-token answers the faster engine finished each before the next arrived, and least-loaded
    # routing rightly kept choosing the same idle replica. Skipped from 2026-12-01 to -07: all 12
    # often landed on one replica; Ray's router then picked among the replicas whose queue length
    # it had cached (entries expire after 10 s) and probed the others only in the background.
    # The router now ranks replicas by its own count of their ongoing requests
    # (voice.scale.router); this module passed 6 of 6 runs so, and 5 of 5 with the old router on
    # 2026-12-07 (the failure did not come back that day)
    body = {"model": "receptionist-tiny", "max_tokens": 48, "ignore_eos": True,
            "messages": [{"role": "user", "content": "when do you open?"}]}  # fmt: skip
    timeout = aiohttp.ClientTimeout(total=scaled(60))
    async with aiohttp.ClientSession(f"http://{cluster}", timeout=timeout) as client:

        async def ask():
            async with client.post("/v1/chat/completions", json=body) as r:
                if r.status != 200:
                    return r.status, None, await r.text()
                return r.status, r.headers.get("x-diffvoice-replica"), await r.json()

        responses = await asyncio.gather(*(ask() for _ in range(12)))
    failed = [r for r in responses if r[0] != 200 or not r[2]["choices"][0]["message"]["content"]]
    assert not failed, failed
    served_by = collections.Counter(replica for _, replica, _ in responses)
    assert len(served_by) == 2 and None not in served_by, served_by


async def test_cluster_metrics_show_both_replicas(cluster):
    import aiohttp
    from prometheus_client.parser import text_string_to_metric_families

    async with aiohttp.ClientSession(f"http://{cluster}") as client:
        async with client.get("/metrics/cluster") as r:
            text = await r.text()
        async with client.get("/metrics") as r:
            own = await r.text()
    replicas = {s.labels.get("replica") for f in text_string_to_metric_families(text)
                for s in f.samples}  # fmt: skip
    assert len(replicas) == 2 and None not in replicas, replicas
    one = {s.labels.get("replica") for f in text_string_to_metric_families(own) for s in f.samples}
    assert len(one) == 1


async def test_losing_a_replica_ends_only_its_calls(cluster, speech):
    from diffvoice.voice.scale.metrics import HUB_NAME, HUB_NAMESPACE

    pcm = speech(QUESTION)
    await _until_idle()  # two calls on each replica: they must start even
    answered, hang_up = [], asyncio.Event()
    tasks = [asyncio.create_task(_call(cluster, pcm, delay=0.4 * i, answered=answered,
                                       hang_up=hang_up)) for i in range(4)]  # fmt: skip
    await asyncio.wait_for(_wait_for(lambda: len(answered) == 4 or any(t.done() for t in tasks)),
                           scaled(180))  # fmt: skip
    assert len(answered) == 4, [t.result().of(protocol.Latency) for t in tasks if t.done()]
    on = collections.Counter(c.started.replica for c in answered)
    assert len(on) == 2, on
    hub = ray.get_actor(HUB_NAME, namespace=HUB_NAMESPACE)
    snap = await hub.snapshot.remote()
    victim_id = next(iter(on))
    ray.kill(ray.get_actor(snap[victim_id]["actor_name"], namespace="serve"), no_restart=False)

    # the victim's calls end; the others stay connected until they hang up
    await asyncio.wait_for(
        _wait_for(lambda: sum(t.done() for t in tasks) == on[victim_id]), scaled(30)
    )
    await asyncio.sleep(1.0)
    for task in tasks:
        assert task.done() == (task.done() and task.result().started.replica == victim_id)
    survivors_open = [t for t in tasks if not t.done()]
    assert len(survivors_open) == 4 - on[victim_id]
    hang_up.set()
    for call in await asyncio.gather(*survivors_open):
        assert call.started.replica != victim_id

    # new calls still succeed (on the survivor, or on Serve's replacement)
    for call in await asyncio.gather(*(_call(cluster, pcm, delay=0.4 * i) for i in range(2))):
        assert _answered(call) and call.started.replica != victim_id
