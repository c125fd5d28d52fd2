"""Priorities in the pure-Python scheduler (fake pass results): priority 0 (live calls) is
admitted first, keeps `reserved_slots` that priority > 0 never takes and queue room that
priority > 0 cannot fill, and a pass with priority-0 rows carries no worse rows; a block step of
worse rows yields to a better request (`better_waiting`). Issue 54 N4: one /v1 client's 80 long
requests used to hold every slot and pass a live turn needed."""

from types import SimpleNamespace

import pytest

from diffvoice.engine.params import EngineConfig, SamplingParams
from diffvoice.engine.scheduler import EngineOverloaded, PriorityRefused, Scheduler, rank
from diffvoice.engine.sequence import Sequence

EOS = 7


def seq(rid, priority=0, draft=False, max_new_tokens=12):
    s = Sequence(rid, list(range(4)), SamplingParams(max_new_tokens=max_new_tokens),
                 model_block=4, decode_block=4, shift=0, prefix_cache=True)
    s.priority, s.draft = priority, draft
    return s


def run_pass(sch):
    rows, admitted = sch.schedule()
    out = SimpleNamespace(window_start=[s.q_start for s in rows],
                          tokens=[[50] * (s.q_end - s.q_start) for s in rows],
                          remaining=[0] * len(rows))
    events = sch.update(rows, out) if rows else []
    return rows, admitted, events


def test_low_priority_never_takes_the_reserved_slots():
    sch = Scheduler(max_running=4, max_queued=8, eos_ids=(EOS,), reserved_slots=2)
    api = [seq(f"api{i}", priority=1, max_new_tokens=400) for i in range(6)]
    for s in api:
        sch.add(s)
    rows, admitted, _ = run_pass(sch)
    assert [s.request_id for s in admitted] == ["api0", "api1"]  # 2 of 4 slots: 2 reserved
    live = seq("live")
    sch.add(live)
    rows, admitted, _ = run_pass(sch)
    assert admitted == [live] and rows == [live]  # admitted at once; the api rows pause
    assert len(sch.waiting) == 4


def test_priority_rows_pause_until_the_better_row_finishes():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,), reserved_slots=1)
    a, b = seq("api", priority=3, max_new_tokens=40), seq("live", max_new_tokens=8)
    sch.add(a)
    run_pass(sch)
    sch.add(b)
    seen = []
    for _ in range(3):
        rows, _, _ = run_pass(sch)
        seen.append([s.request_id for s in rows])
    assert seen == [["live"], ["live"], ["api"]]  # 8 tokens = 2 blocks, then the api resumes


def test_share_passes_when_configured():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,), reserved_slots=1,
                    priority_share_passes=True)
    sch.add(seq("api", priority=1, max_new_tokens=40))
    run_pass(sch)
    sch.add(seq("live"))
    rows, _, _ = run_pass(sch)
    assert sorted(s.request_id for s in rows) == ["api", "live"]


def test_low_priority_cannot_fill_the_queue_priority_zero_needs():
    sch = Scheduler(max_running=2, max_queued=2, eos_ids=(EOS,), reserved_slots=1)
    for i in range(3):  # 2 + 2 - 1 places for priority > 0
        sch.add(seq(f"api{i}", priority=1))
    with pytest.raises(EngineOverloaded, match="reserved for priority 0"):
        sch.add(seq("api3", priority=1))
    sch.add(seq("live"))  # the reserved place
    with pytest.raises(EngineOverloaded):
        sch.add(seq("live2"))  # the engine itself is full now


def test_waiting_order_is_priority_then_arrival():
    sch = Scheduler(max_running=1, max_queued=8, eos_ids=(EOS,), reserved_slots=0)
    order = [("c", 2), ("a", 1), ("live1", 0), ("b", 1), ("live2", 0)]
    for rid, p in order:
        sch.add(seq(rid, priority=p, max_new_tokens=4))
    admitted = []
    for _ in range(5):
        admitted += [s.request_id for s in run_pass(sch)[1]]
    assert admitted == ["live1", "live2", "a", "b", "c"]


def test_better_waiting_sees_only_requests_that_could_run():
    sch = Scheduler(max_running=3, max_queued=8, eos_ids=(EOS,), reserved_slots=1)
    sch.add(seq("api0", priority=1, max_new_tokens=400))
    sch.add(seq("api1", priority=1, max_new_tokens=400))
    run_pass(sch)
    assert len(sch.running) == 2 and len(sch.free_slots) == 1
    sch.add(seq("api2", priority=1))  # must leave the last slot: nothing to yield to
    assert not sch.better_waiting(rank(sch.running[0]))
    sch.add(seq("live"))
    assert sch.better_waiting((False, 1)) and not sch.better_waiting((False, 0))
    assert sch.better_waiting((True, 0))  # drafts yield to any admissible real request


def test_reserved_slots_leave_one_slot_to_every_priority():
    sch = Scheduler(max_running=1, max_queued=2, eos_ids=(EOS,), reserved_slots=2)
    assert sch.reserved_slots == 0
    sch.add(seq("api", priority=1))
    assert run_pass(sch)[1]  # runs: a 1-slot engine reserves nothing
    with pytest.raises(ValueError, match="reserved_slots"):
        EngineConfig(reserved_slots=-1)


def _api(rid, client, max_new_tokens=400):
    s = seq(rid, priority=1, max_new_tokens=max_new_tokens)
    s.client = client
    return s


def test_a_clients_single_request_goes_before_anothers_backlog():
    sch = Scheduler(max_running=3, max_queued=16, eos_ids=(EOS,), reserved_slots=1)
    for i in range(6):
        sch.add(_api(f"flood{i}", "ip:flood"))
    run_pass(sch)  # flood0, flood1 take the two slots priority > 0 may use
    sch.add(_api("innocent", "ip:innocent", max_new_tokens=4))
    sch.abort("flood0")  # a slot frees: the innocent's request, not flood2, takes it
    _, admitted, _ = run_pass(sch)
    assert [s.request_id for s in admitted] == ["innocent"]


def test_a_full_share_evicts_the_biggest_clients_newest_waiting_request():
    sch = Scheduler(max_running=2, max_queued=4, eos_ids=(EOS,), reserved_slots=1)
    assert sch.reserved_places == 2  # the slot and a quarter of the queue
    for i in range(4):  # 2 + 4 - 2 places for priority > 0: all one client's
        sch.add(_api(f"flood{i}", "ip:flood"))
    run_pass(sch)
    sch.add(_api("innocent", "ip:innocent"))
    assert [s.request_id for s in sch.evicted] == ["flood3"]
    assert sch.evicted[0].finish_reason == "evicted"
    sch.evicted.clear()
    # a second client evens out; past even shares the newcomer is refused itself
    sch.add(_api("innocent2", "ip:innocent"))
    assert [s.request_id for s in sch.evicted] == ["flood2"]
    with pytest.raises(EngineOverloaded):
        sch.add(_api("innocent3", "ip:innocent"))
    # an engine full of priority-0 work refuses a priority > 0 request as PriorityRefused too
    # (the API answers it 429, not 503: its share, not the server, is what is full)
    busy = Scheduler(max_running=2, max_queued=4, eos_ids=(EOS,), reserved_slots=1)
    for i in range(6):
        busy.add(seq(f"live{i}"))
    with pytest.raises(PriorityRefused):
        busy.add(_api("late", "ip:late"))
    with pytest.raises(EngineOverloaded) as full:
        busy.add(seq("live6"))
    assert not isinstance(full.value, PriorityRefused)
    with pytest.raises(EngineOverloaded):  # a request of no client has no share to claim
        sch.add(_api("anonymous", None))


async def test_the_evicted_request_is_refused_and_the_other_client_answered(tmp_path):
    """Through a real engine: client A fills the places priority > 0 may hold with long
    requests; client B's one request evicts A's newest waiting one (PriorityRefused, an
    EngineOverloaded: the API answers it 429) and is answered."""
    import asyncio

    from diffvoice.engine import Engine, PriorityRefused
    from diffvoice.engine.testing import make_random_checkpoint

    path = make_random_checkpoint(tmp_path / "m", family="sdar", seed=3)
    engine = Engine.from_pretrained(path, EngineConfig(
        device="cpu", enforce_eager=True, max_running=2, max_queued=3, reserved_slots=1))
    chat = [{"role": "user", "content": "hello"}]
    long = SamplingParams(max_new_tokens=256, ignore_eos=True)

    async def answer(rid, params, client):
        return [d async for d in engine.generate(chat, params, request_id=rid, priority=1,
                                                 client=client)]

    try:
        flood = [asyncio.create_task(answer(f"a{i}", long, "A")) for i in range(4)]
        for _ in range(3000):  # the four are queued (30 s at most)
            if len(engine.active_request_ids()) == 4:
                break
            await asyncio.sleep(0.01)
        innocent = await answer("b", SamplingParams(max_new_tokens=4), "B")
        assert innocent[-1].finished and innocent[-1].finish_reason in ("stop", "length")
        with pytest.raises(PriorityRefused, match="fair shares"):
            await flood[3]
        for task in flood[:3]:
            task.cancel()
    finally:
        engine.close()
