"""Issue 12, problems 1 and 2 (engine side): one request that fails at admission fails alone,
seeds outside [0, 2**63) are refused up front, and an over-long prompt is refused before the chat
template or tokenizer see it — without blocking the caller's event loop."""

import asyncio
import time

import pytest

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine import engine as engine_module
from diffvoice.engine.params import MAX_SEED
from diffvoice.engine.testing import make_random_checkpoint

HELLO = [{"role": "user", "content": "Hello!"}]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    ckpt = make_random_checkpoint(tmp_path_factory.mktemp("m"), family="sdar", seed=3)
    eng = Engine.from_pretrained(ckpt, EngineConfig(max_running=4, max_prompt_chars=2000))
    yield eng
    eng.close()


@pytest.mark.parametrize("seed", [-1, MAX_SEED, 2**64, 10**5000, True, 1.5],
                         ids=["neg", "2^63", "2^64", "huge", "bool", "float"])
def test_sampling_params_refuse_out_of_range_seeds(seed):
    with pytest.raises(ValueError, match="seed"):
        SamplingParams(temperature=0.7, seed=seed)


def test_sampling_params_accept_the_whole_seed_range():
    for seed in (0, 1, MAX_SEED - 1):
        assert SamplingParams(temperature=0.7, seed=seed).seed == seed


async def test_a_request_failing_at_admission_fails_alone(engine, monkeypatch):
    """A request whose canvas cannot be laid out (what a seed torch cannot take used to do in
    manual_seed) fails only itself; the requests admitted in the same pass finish normally."""
    real_admit = engine.runner.admit

    def admit(seq):
        if seq.request_id == "bad":
            raise RuntimeError("Overflow when unpacking long long")
        real_admit(seq)

    monkeypatch.setattr(engine.runner, "admit", admit)
    good = SamplingParams(max_new_tokens=8, ignore_eos=True)

    async def run(request_id):
        return [d async for d in engine.generate(HELLO, good, request_id=request_id)]

    results = await asyncio.wait_for(
        asyncio.gather(run("a"), run("bad"), run("b"), return_exceptions=True), 60)
    assert isinstance(results[1], ValueError) and "admission" in str(results[1])
    for deltas in (results[0], results[2]):
        assert not isinstance(deltas, BaseException), deltas
        assert deltas[-1].finished and deltas[-1].finish_reason == "length"
    stats = engine.stats()
    assert stats["running"] == 0 and stats["callers"] == 0 and stats["generators"] == 0
    assert stats["free_slots"] == stats["max_running"]


async def test_long_prompt_refused_before_templating(engine, monkeypatch):
    calls = []
    monkeypatch.setattr(engine.tokenizer, "encode_chat",
                        lambda m: calls.append(m) or [1, 2, 3])
    with pytest.raises(ValueError, match="max_prompt_chars"):
        async for _ in engine.generate([{"role": "user", "content": "x" * 2001}]):
            pass
    assert calls == []


async def test_tokenising_runs_off_the_event_loop(engine, monkeypatch):
    """A slow tokenisation (a long prompt) must not stall other coroutines on the loop."""
    real = engine.tokenizer.encode_chat

    def slow(messages):
        time.sleep(0.5)
        return real(messages)

    monkeypatch.setattr(engine.tokenizer, "encode_chat", slow)
    ticks = 0

    async def ticker():
        nonlocal ticks
        for _ in range(100):
            await asyncio.sleep(0.01)
            ticks += 1

    tick_task = asyncio.create_task(ticker())
    async for _ in engine.generate(HELLO, SamplingParams(max_new_tokens=4)):
        pass
    await tick_task
    # the loop kept running during the 0.5 s tokenisation: ~50 ticks happened meanwhile
    assert ticks == 100


@pytest.mark.parametrize("chars", [10, 500], ids=["worker-prepared", "thread-prepared"])
async def test_a_caller_that_leaves_while_its_prompt_is_tokenised_leaves_nothing(
        engine, monkeypatch, chars):
    """Short prompts are prepared by the worker thread, long ones on a thread of their own; a
    caller that leaves during that step neither runs nor keeps a slot, and the next request is
    served."""
    real = engine.tokenizer.encode_chat
    started = []

    def slow(messages):
        started.append(time.monotonic())
        time.sleep(0.3)
        return real(messages)

    monkeypatch.setattr(engine.tokenizer, "encode_chat", slow)
    monkeypatch.setattr(engine_module, "PREPARE_ON_WORKER_CHARS", 100)
    passes = engine.stats()["passes"]

    async def call():
        async for _ in engine.generate([{"role": "user", "content": "x" * chars}],
                                       SamplingParams(max_new_tokens=8, ignore_eos=True)):
            pass

    task = asyncio.create_task(call())
    for _ in range(100):
        if started:
            break
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.5)  # the tokenisation ends meanwhile
    stats = engine.stats()
    assert stats["passes"] == passes  # it never ran
    assert stats["running"] == stats["queued"] == stats["callers"] == 0
    monkeypatch.setattr(engine.tokenizer, "encode_chat", real)
    deltas = [d async for d in engine.generate(HELLO, SamplingParams(max_new_tokens=8,
                                                                     ignore_eos=True))]
    assert deltas[-1].finish_reason == "length"
