"""The asyncio Engine API: streaming, cancellation, abort, admission cap, isolation of bad
requests, stop strings, seeded sampling."""

import asyncio

import pytest

from diffvoice.engine import Engine, EngineConfig, EngineOverloaded, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint

HELLO = [{"role": "user", "content": "Hello!"}]
UNIT = 5.0  # seconds; generous for two shared CPU cores


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
    return make_random_checkpoint(tmp_path_factory.mktemp("m"), family="sdar", seed=2,
                                  init_std=0.3)


@pytest.fixture
def engine(ckpt):
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=2, max_queued=1))
    yield eng
    eng.close()


async def drain(agen):
    return [d async for d in agen]


async def wait_until(pred, limit_s=UNIT):
    for _ in range(int(limit_s / 0.01)):
        if pred():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not reached")


async def test_stream_is_block_by_block(engine):
    deltas = await drain(engine.generate(HELLO, SamplingParams(max_new_tokens=12,
                                                               ignore_eos=True)))
    # sdar block 4: at least three committed blocks, text concatenates to the decoded answer
    assert len(deltas) >= 3 and deltas[-1].finished and deltas[-1].finish_reason == "length"
    ids = [t for d in deltas for t in d.token_ids]
    assert len(ids) == 12
    assert "".join(d.text for d in deltas) == engine.tokenizer.decode(ids)
    assert deltas[0].first_block_latency_s is not None and deltas[0].first_block_latency_s > 0


async def test_cancelling_the_caller_frees_the_slot(engine):
    params = SamplingParams(max_new_tokens=400, ignore_eos=True, steps_per_block=4)
    started = asyncio.Event()

    async def consume():
        async for _ in engine.generate(HELLO, params, request_id="long"):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), UNIT)
    assert "long" in engine.active_request_ids()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not engine.active_request_ids())
    assert engine.stats()["running"] == 0


async def test_abort_ends_stream_with_abort_reason(engine):
    params = SamplingParams(max_new_tokens=400, ignore_eos=True)
    agen = engine.generate(HELLO, params, request_id="r1")
    first = await agen.__anext__()
    assert not first.finished
    engine.abort("r1")
    rest = [d async for d in agen]
    assert rest[-1].finished and rest[-1].finish_reason == "abort"
    assert "r1" not in engine.active_request_ids()


async def test_admission_cap_rejects_clearly_and_others_finish(engine):
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    gens = [engine.generate(HELLO, params) for _ in range(3)]  # 2 running + 1 queued
    firsts = [asyncio.create_task(g.__anext__()) for g in gens]
    await asyncio.sleep(0)
    await wait_until(lambda: len(engine.active_request_ids()) == 3)
    with pytest.raises(EngineOverloaded, match="engine is full"):
        await engine.generate(HELLO, params).__anext__()
    for g, f in zip(gens, firsts, strict=True):
        await f
        rest = await drain(g)
        assert (rest or [await f])[-1].finished


async def test_invalid_request_does_not_disturb_others(engine):
    good = asyncio.create_task(drain(engine.generate(
        HELLO, SamplingParams(max_new_tokens=16, ignore_eos=True))))
    with pytest.raises(ValueError, match="block_size 3 must divide"):
        await engine.generate(HELLO, SamplingParams(block_size=3)).__anext__()
    with pytest.raises(ValueError, match="exceeds max_seq_len"):
        await engine.generate(HELLO, SamplingParams(max_new_tokens=10**6)).__anext__()
    with pytest.raises(ValueError, match="policy must be one of"):
        SamplingParams(policy="bogus")
    deltas = await asyncio.wait_for(good, UNIT * 4)
    assert deltas[-1].finish_reason == "length"
    assert sum(len(d.token_ids) for d in deltas) == 16


async def test_stop_string_truncates(engine):
    full = await drain(engine.generate(HELLO, SamplingParams(max_new_tokens=24,
                                                             ignore_eos=True)))
    text = "".join(d.text for d in full)
    assert len(text) > 6
    stop = text[3:6]
    cut = await drain(engine.generate(HELLO, SamplingParams(max_new_tokens=24,
                                                            ignore_eos=True, stop=(stop,))))
    assert "".join(d.text for d in cut) == text[: text.find(stop)]
    assert cut[-1].finish_reason == "stop"


async def test_seeded_sampling_is_reproducible_across_batch_mates(engine):
    params = SamplingParams(max_new_tokens=12, temperature=0.8, seed=1234, ignore_eos=True)
    alone = await drain(engine.generate(HELLO, params))
    together = await asyncio.gather(drain(engine.generate(HELLO, params)), drain(
        engine.generate([{"role": "user", "content": "Another caller"}],
                        SamplingParams(max_new_tokens=20))))
    ids = lambda ds: [t for d in ds for t in d.token_ids]  # noqa: E731
    assert ids(alone) == ids(together[0])
    other = await drain(engine.generate(HELLO, SamplingParams(
        max_new_tokens=12, temperature=0.8, seed=99, ignore_eos=True)))
    assert ids(other) != ids(alone)


@pytest.mark.parametrize("family", ["llada", "dream"])
async def test_bidirectional_prefix_cache_runs_and_can_be_switched_off(tmp_path, family):
    path = make_random_checkpoint(tmp_path, family=family, init_std=0.3)
    params = SamplingParams(max_new_tokens=10, block_size=4, steps_per_block=2,
                            ignore_eos=True)
    outs = {}
    for cache in (True, False):
        eng = Engine.from_pretrained(path, EngineConfig(max_running=2, prefix_cache=cache))
        try:
            deltas = await drain(eng.generate(HELLO, params))
            outs[cache] = ([t for d in deltas for t in d.token_ids], eng.stats()["passes"])
        finally:
            eng.close()
    assert len(outs[True][0]) == len(outs[False][0]) == 10
    assert outs[True][1] == outs[False][1] == 6  # 3 blocks (4, 4, 2) x 2 passes


def test_a_caller_whose_event_loop_closed_does_not_stop_the_engine(ckpt):
    """A request left running when its asyncio loop ends is dropped; the engine serves on."""
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=2))
    try:
        async def start_and_leave():
            agen = eng.generate(HELLO, SamplingParams(max_new_tokens=400, ignore_eos=True),
                                request_id="orphan")
            await agen.__anext__()  # running; the loop closes with the generator suspended

        asyncio.run(start_and_leave())
        deltas = asyncio.run(drain(eng.generate(HELLO, SamplingParams(max_new_tokens=8,
                                                                        ignore_eos=True))))
        assert deltas[-1].finished and deltas[-1].finish_reason == "length"
        assert eng._thread.is_alive()
        assert "orphan" not in eng.active_request_ids()
    finally:
        eng.close()
