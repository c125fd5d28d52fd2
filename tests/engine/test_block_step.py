"""Block steps (engine.block_step): a decode block's passes run back to back with no host read
between them, one read at the end, and the answers are those of pass-by-pass decoding, token
for token (greedy and seeded sampling, every family, fixed and data-dependent policies, one row
and a mixed batch). The reads are counted with engine.profiling.HostReads on the worker thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.decoding import resolve
from diffvoice.engine.loader import read_config
from diffvoice.engine.profiling import HostReads
from diffvoice.engine.testing import make_random_checkpoint

FAMILIES = ["sdar", "fast_dllm_v2", "llada", "dream"]
RECEPTIONIST = Path(__file__).resolve().parents[2] / "models" / "receptionist-tiny"
CHATS = [[{"role": "user", "content": text}] for text in
         ["hello there", "when do you open on saturday?", "a haircut, please", "thanks, bye",
          "can I book a cleaning", "where are you"]]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return {f: make_random_checkpoint(tmp_path_factory.mktemp(f), family=f, seed=4,
                                      init_std=0.5) for f in FAMILIES}


def _params():
    """Fixed schedules and data-dependent policies, both decodings, greedy and sampled."""
    return [
        SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=2),
        SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=3, temperature=1.0,
                       seed=11),
        SamplingParams(max_new_tokens=20, decoding="fast", policy="threshold", threshold=0.6),
        SamplingParams(max_new_tokens=20, decoding="fast", policy="threshold", threshold=0.6,
                       temperature=0.8, seed=5),
        SamplingParams(max_new_tokens=20, decoding="fast", policy="entropy", entropy_bound=0.5),
        SamplingParams(max_new_tokens=20),  # the family's own decoding
        SamplingParams(max_new_tokens=20, policy="low_confidence", steps_per_block=3),
        SamplingParams(max_new_tokens=20, ignore_eos=True, temperature=1.0, seed=2),
    ]


class Probe:
    """Counts the host reads of each runner pass and the block rounds (worker steps in which a
    row committed a block) of one engine."""

    def __init__(self, engine: Engine):
        self.quiet_reads = 0  # reads made by passes that were told not to read
        self.quiet_passes = 0
        self.reads = 0
        self.rounds = 0
        self.collects = 0
        step, update = engine.runner.step, engine.scheduler.update
        collect = engine.runner.collect

        def counted_step(rows, block=None, read=True, wait=True):
            with HostReads() as r:
                out = step(rows, block, read, wait)
            self.reads += r.count
            if not read:
                self.quiet_reads += r.count
                self.quiet_passes += 1
            return out

        def counted_collect(pending):  # a step's one read, started in its last pass, taken
            with HostReads() as r:
                out = collect(pending)
            self.reads += r.count
            self.collects += 1
            return out

        def counted_update(rows, out, ahead=None):
            events = update(rows, out, ahead)
            self.rounds += bool(events)
            return events

        engine.runner.step = counted_step
        engine.runner.collect = counted_collect
        engine.scheduler.update = counted_update


def _decode(path, params, concurrent: bool, **config):
    engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                       max_running=8, **config))
    probe = Probe(engine)

    async def one(messages):
        ids, reason = [], None
        async for d in engine.generate(messages, params):
            ids += d.token_ids
            reason = d.finish_reason or reason
        return ids, reason

    async def run():
        if concurrent:
            return await asyncio.gather(*(one(m) for m in CHATS))
        return [await one(m) for m in CHATS]

    try:
        return asyncio.run(run()), probe, engine.stats()
    finally:
        engine.close()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("concurrent", [False, True], ids=["batch1", "batch6"])
def test_block_steps_decode_what_pass_by_pass_decodes(checkpoints, family, concurrent):
    for params in _params():
        by_pass, _, _ = _decode(checkpoints[family], params, concurrent, block_step_passes=1)
        by_block, probe, _ = _decode(checkpoints[family], params, concurrent)
        assert by_block == by_pass, (family, params)
        assert probe.quiet_reads == 0, (family, params)
        # a sampled row whose passes per block depend on the data steps one pass at a time
        policy = resolve(params, read_config(checkpoints[family])[0])[0].policy
        one_at_a_time = params.temperature > 0 and policy in ("threshold", "entropy",
                                                              "threshold_ge", "sdar_dynamic")
        assert (probe.quiet_passes == 0) == one_at_a_time, (family, policy, params)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("concurrent", [False, True], ids=["batch1", "batch6"])
def test_overlapped_steps_decode_what_pass_by_pass_decodes(checkpoints, family, concurrent):
    """EngineConfig.overlap: a step whose rows surely finish their blocks is read only after the
    next step is queued. Same tokens as pass by pass, one read a step, as many as without, and
    a row that ended at an EOS runs at most one step for nothing (late_row_passes)."""
    overlapped = 0
    several_blocks = SamplingParams(max_new_tokens=20, decoding="fast", steps_per_block=2,
                                    block_size=4)  # (LLaDA's fast answer is one block)
    for params in [*_params(), several_blocks]:
        by_pass, _, _ = _decode(checkpoints[family], params, concurrent, block_step_passes=1)
        got, probe, stats = _decode(checkpoints[family], params, concurrent, overlap=True)
        assert got == by_pass, (family, params)
        assert probe.quiet_reads == 0 and probe.reads == probe.collects, (family, params)
        if not concurrent:  # (concurrent: how callers' requests fall into steps is timing)
            _, unlapped, _ = _decode(checkpoints[family], params, concurrent, overlap=False)
            assert probe.reads == unlapped.reads, (family, params)
        overlapped += stats["overlapped_steps"]
        # a late row ran one step at most: no more than a block's passes per answer
        assert stats["late_row_passes"] <= len(CHATS) * (params.steps_per_block or 4) + 8
        if params.policy == "threshold" or params.temperature > 0 and params.policy:
            assert stats["overlapped_steps"] == 0, (family, params)  # data-dependent
    assert overlapped > 0, family  # fixed schedules overlapped


def test_overlap_counts_the_passes_of_a_row_that_ended_one_step_late(checkpoints):
    """An answer that ends at an EOS is only known at the read, after the next step was queued:
    that step's passes for the row are counted (and not read when no row of it is left), its
    answer is the one it had, and a row that reaches max_new_tokens is kept out of the next step
    (the host knows it ends)."""
    # the shipped receptionist as served: its answers end at an EOS (random weights' do not)
    eos = SamplingParams(max_new_tokens=48, decoding="fast", policy="low_confidence",
                         steps_per_block=4)
    alone, base_probe, base = _decode(RECEPTIONIST, eos, concurrent=False, overlap=False)
    got, probe, stats = _decode(RECEPTIONIST, eos, concurrent=False, overlap=True)
    assert got == alone
    assert probe.reads == base_probe.reads  # a step whose rows had all ended is not read
    stops = sum(reason == "stop" for _, reason in alone)
    assert stops > 0, alone
    assert stats["overlapped_steps"] > 0
    # each stop ran one block step (its 4 passes) for nothing, no more
    assert 0 < stats["late_row_passes"] <= 4 * stops
    assert stats["passes"] == base["passes"] + stats["late_row_passes"]
    length = SamplingParams(max_new_tokens=16, ignore_eos=True, decoding="fast",
                            steps_per_block=2)
    (got, *_), _, stats = _decode(checkpoints["sdar"], length, concurrent=False, overlap=True)
    assert got[1] == "length" and len(got[0]) == 16
    assert stats["overlapped_steps"] > 0 and stats["late_row_passes"] == 0


@pytest.mark.parametrize("family", ["sdar", "fast_dllm_v2"])
@pytest.mark.parametrize("concurrent", [False, True], ids=["batch1", "batch6"])
def test_one_read_per_block_with_a_fixed_schedule_two_with_a_threshold(checkpoints, family,
                                                                       concurrent):
    fixed = SamplingParams(max_new_tokens=32, ignore_eos=True, decoding="fast",
                           steps_per_block=2)
    _, probe, _ = _decode(checkpoints[family], fixed, concurrent)
    assert probe.rounds > 0 and probe.reads <= probe.rounds, (probe.reads, probe.rounds)
    if not concurrent:  # what the step saves: a read after each of a block's (up to) 2 passes
        _, pass_by_pass, stats = _decode(checkpoints[family], fixed, concurrent,
                                         block_step_passes=1)
        assert pass_by_pass.reads == stats["passes"] > 1.5 * pass_by_pass.rounds
    threshold = SamplingParams(max_new_tokens=32, ignore_eos=True, decoding="fast",
                               policy="threshold", threshold=0.6)
    _, probe, _ = _decode(checkpoints[family], threshold, concurrent)
    assert probe.reads <= 2 * probe.rounds, (probe.reads, probe.rounds)


def test_a_constrained_row_is_read_after_every_pass(checkpoints):
    """Its skeleton may grow after any pass (engine.constrained.hook): one pass a step."""
    tool = {"type": "function", "function": {"name": "pick", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
        "required": ["n"]}}}
    params = SamplingParams(max_new_tokens=16, tools=(tool,), tool_choice="required")
    (answer, *_), probe, stats = _decode(checkpoints["sdar"], params, concurrent=False)
    assert probe.quiet_passes == 0 and stats["passes"] > 0


@pytest.mark.parametrize("low", ["draft", "priority"])
async def test_a_draft_only_step_yields_to_a_real_request(checkpoints, low):
    """Drafts never hold a real request back for a whole block step: once one waits, the
    draft-only step reads at its next pass and the real request is scheduled (passes slowed
    to 20 ms so it arrives mid-step). The same for a priority-1 request (a /v1 client's)
    when a priority-0 one (a live call's turn) arrives, and no pass carries both."""
    import threading
    import time

    engine = Engine.from_pretrained(checkpoints["fast_dllm_v2"],
                                    EngineConfig(device="cpu", enforce_eager=True))
    log, quiet = [], threading.Event()
    step = engine.runner.step

    def slow_step(rows, block=None, read=True, wait=True):
        log.append((all(r.draft or r.priority for r in rows), read, time.monotonic()))
        assert len({(r.draft, r.priority) for r in rows}) == 1  # one rank per pass
        if not read and block.index == 1 and block.passes >= 6:  # early in a long step
            quiet.set()
        time.sleep(0.02)
        return step(rows, block, read, wait)

    engine.runner.step = slow_step

    async def answer(messages, params, draft=False, priority=0):
        return [d async for d in engine.generate(messages, params, draft=draft,
                                                 priority=priority)]

    try:
        long = SamplingParams(max_new_tokens=64, ignore_eos=True, decoding="fast",
                              steps_per_block=8)  # v2 fixture: 8-token blocks, 8 passes each
        draft = asyncio.create_task(answer(CHATS[0], long, **(
            {"draft": True} if low == "draft" else {"priority": 1})))
        assert await asyncio.to_thread(quiet.wait, 30)
        arrived = time.monotonic()
        await answer(CHATS[1], SamplingParams(max_new_tokens=8))
        after = [entry for entry in log if entry[2] >= arrived]
        first_read = next(i for i, (_, read, _) in enumerate(after) if read)
        assert first_read <= 2, after[:8]  # a pass in flight, one before the request was queued
        assert any(not drafts for drafts, _, _ in after)  # the real request ran
        assert not draft.done()  # and finished first
        draft.cancel()
    finally:
        engine.close()
