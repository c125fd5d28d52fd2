"""No request can stop the shared engine (issue 39): a request's tools / response_format are
bounded and compiled before admission, off the worker thread, under a time budget; a row whose
own work raises inside a batched pass fails alone; a pass that still raises is re-run row by row.
Random-weight engine; every innocent request's tokens are compared with the same request alone."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.constrained import layout as layout_mod
from diffvoice.engine.constrained import plan as plan_mod
from diffvoice.engine.constrained.limits import (
    MAX_TOKENIZATIONS,
    MAX_TOOLS,
    Budget,
    PreparationAborted,
)
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.latency_bench.reliability.schemas import hostile_request

HI = [{"role": "user", "content": "hello there"}]
PLAIN = SamplingParams(max_new_tokens=12, ignore_eos=True)


def fn(name, props):
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("iso"), family="sdar", seed=3,
                                  init_std=0.5)
    eng = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                    max_running=16, max_queued=64))
    yield eng
    eng.close()


async def tokens(engine, messages=HI, params=PLAIN):
    out = []
    async for d in engine.generate(messages, params):
        out.extend(d.token_ids)
    return out


async def outcome(engine, params, messages=HI):
    try:
        return await tokens(engine, messages, params)
    except ValueError as exc:
        return exc


def innocent(i):
    return [{"role": "user", "content": f"question number {i}, please"}]


# ---------------------------------------------------------------- 1: one request fails a pass
async def test_huge_max_length_fails_nobody(engine):
    """maxLength 1e30 (>= 2^63) with tool_choice "required": it overflowed inside the batched pass
    and failed every row batched with it."""
    alone = [await tokens(engine, innocent(i)) for i in range(5)]
    bad = SamplingParams(max_new_tokens=12, tools=(fn("f", {"s": {"type": "string",
                                                                  "maxLength": 1e30}}),),
                         tool_choice="required")
    results = await asyncio.gather(outcome(engine, bad),
                                   *[tokens(engine, innocent(i)) for i in range(5)])
    assert results[1:] == alone
    assert isinstance(results[0], list)  # clamped to what a slot holds: it decodes


# ------------------------------------------------- 2: many tools hold the worker for minutes
def test_tool_count_is_capped_and_compile_is_linear(engine, monkeypatch):
    with pytest.raises(ValueError, match=f"at most {MAX_TOOLS} tools"):
        engine.prepare(HI, SamplingParams(tools=tuple(fn(f"t{i}", {}) for i in range(5000))))
    calls = []
    real = layout_mod._ChoiceSpec._build

    def counting(self, vocab, before, after):
        calls.append(len(self.values))
        return real(self, vocab, before, after)

    monkeypatch.setattr(layout_mod._ChoiceSpec, "_build", counting)
    for n in (8, 32):
        plan_mod._cache.clear()
        calls.clear()
        engine.prepare(HI, SamplingParams(tools=tuple(fn(f"n{n}t{i}", {}) for i in range(n))))
        # the tool-name slot (n candidates) is tokenized once, not once per tool
        assert calls.count(n) == 1, calls


async def test_schema_compiles_off_the_worker_thread(engine, monkeypatch):
    threads = []
    real = plan_mod._compile

    def spy(*args, **kwargs):
        threads.append(threading.current_thread().name)
        return real(*args, **kwargs)

    monkeypatch.setattr(plan_mod, "_compile", spy)
    plan_mod._cache.clear()
    params = SamplingParams(max_new_tokens=8, tools=(fn("g", {"n": {"type": "integer",
                                                                    "minimum": 0,
                                                                    "maximum": 9}}),),
                            tool_choice="required")
    await tokens(engine, params=params)
    assert threads and all(t.startswith("diffvoice-prepare") for t in threads), threads


async def test_a_cancelled_request_stops_its_compile(engine, monkeypatch):
    """A compile that would run on is stopped by its caller's cancellation (budget checks)."""
    stopped = threading.Event()
    real = layout_mod._ChoiceSpec._build

    def slow(self, vocab, before, after):
        try:
            while True:
                self.budget.check(self.path)
                threading.Event().wait(0.005)
        except PreparationAborted:
            stopped.set()
            raise
        return real(self, vocab, before, after)

    monkeypatch.setattr(layout_mod._ChoiceSpec, "_build", slow)
    import dataclasses

    monkeypatch.setattr(engine, "config", dataclasses.replace(engine.config,
                                                              prepare_budget_s=60.0))
    plan_mod._cache.clear()
    params = SamplingParams(tools=(fn("slow_tool", {"s": {"enum": ["a", "b"]}}),),
                            tool_choice="required")
    task = asyncio.create_task(tokens(engine, params=params))
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await asyncio.to_thread(stopped.wait, 10)


def test_budget_expires():
    budget = Budget(0.0)
    with pytest.raises(PreparationAborted, match="preparation budget"):
        budget.check("x")
    cancelled = threading.Event()
    cancelled.set()
    with pytest.raises(PreparationAborted, match="cancelled"):
        Budget(60, cancelled).check()



TIME = r"^([01]\d|2[0-3]):([0-5]\d)$"  # 1,440 candidates a slot


def test_a_compile_past_its_tokenization_bound_is_refused_before_any_is_built(engine,
                                                                           monkeypatch):
    """The compile's work is counted, not timed: a request whose slots hold more candidates
    than MAX_TOKENIZATIONS is a 400 naming the slot, with no time budget at all, before a
    single candidate is tokenized, and the refusal is remembered for its shape. One slot fewer
    compiles."""
    builds = []
    real = layout_mod._ChoiceSpec._build

    def spy(self, vocab, before, after):
        builds.append(self.path)
        return real(self, vocab, before, after)

    monkeypatch.setattr(layout_mod._ChoiceSpec, "_build", spy)
    slots = MAX_TOKENIZATIONS // 1440 + 1
    tools = [fn(f"t{i}", {"at": {"type": "string", "pattern": TIME}}) for i in range(slots)]
    plan_mod._cache.clear()
    eos = int(engine.model_config.eos_token_ids[0])
    args = (tools, "required", None, engine.tokenizer, eos)
    for _ in range(2):
        with pytest.raises(ValueError, match=rf"tools\[t{slots - 1}\]\.parameters\.at: .*more "
                           rf"than {MAX_TOKENIZATIONS} candidate tokenizations") as err:
            plan_mod.build_plan(*args, budget=Budget(float("inf")))
        assert not isinstance(err.value, PreparationAborted)
        assert builds == []
    plan = plan_mod.build_plan(tools[:-1], "required", None, engine.tokenizer, eos)
    assert plan is not None and builds == ["tool name"] + [f"tools[t{i}].parameters.at"
                                                           for i in range(slots - 1)]

# --------------------------------------------------------------------------------- 3: ReDoS
@pytest.mark.timeout(60)
@pytest.mark.parametrize("pattern", [r"(\d?\d?\d?\d?\d?:?){10}y", r"^(\d|\d\d)+:$"])
def test_catastrophic_patterns_take_no_time(engine, pattern):
    """Python's backtracking `re` took 19 s on {7} and minutes on {10}; RE2 is linear."""
    params = SamplingParams(tools=(fn("r", {"t": {"type": "string", "pattern": pattern}}),),
                            tool_choice="required")
    with pytest.raises(ValueError, match="time-of-day"):
        engine.prepare(HI, params)


def test_patterns_re2_cannot_run_are_refused(engine):
    params = SamplingParams(tools=(fn("r", {"t": {"type": "string",
                                                  "pattern": r"(?=1)\d\d:\d\d"}}),),
                            tool_choice="required")
    with pytest.raises(ValueError, match="RE2"):
        engine.prepare(HI, params)


# ------------------------------------------------------- 6: client mistakes answered with 500
MALFORMED = [
    ({"properties": [1]}, "properties"),
    ({"properties": "abc"}, "properties"),
    ({"properties": {"x": {"type": "integer", "minimum": "a"}}}, "minimum"),
    ({"properties": {"x": {"type": "string", "maxLength": [1]}}}, "maxLength"),
    ({"properties": {"x": {"type": "string", "maxLength": float("inf")}}}, "maxLength"),
    ({"properties": {"x": {"type": "string", "minLength": [1]}}}, "minLength"),
    ({"properties": {"x": {"enum": 5}}}, "enum"),
    ({"properties": {"x": {"type": "integer", "maximum": float("nan")}}}, "maximum"),
    ({"properties": {"x": {"type": "string", "maxLength": -3}}}, "maxLength"),
    ({"properties": {"x": {"type": "frob"}}}, "type"),
    ({"properties": {"x": 7}}, "x"),
]


@pytest.mark.parametrize("parameters,field", MALFORMED)
def test_malformed_schema_values_are_value_errors_naming_the_field(engine, parameters, field):
    params = SamplingParams(tools=({"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", **parameters}}},), tool_choice="required")
    with pytest.raises(ValueError, match=field):
        engine.prepare(HI, params)


def test_template_kwargs_that_break_the_template_are_value_errors(engine):
    with pytest.raises(ValueError, match="namespace"):
        engine.prepare(HI, PLAIN, chat_template_kwargs={"namespace": 1})


# ------------------------------------------------------------------ last line: row isolation
async def test_a_row_whose_constraint_raises_fails_alone(engine, monkeypatch):
    from diffvoice.engine.constrained.state import ConstrainedState

    real = ConstrainedState.rules

    def rules(self, rel, cur, mask_id, logits):
        if self.plan.names == ["faulty"]:
            raise RuntimeError("injected fault in one row's constraint")
        return real(self, rel, cur, mask_id, logits)

    monkeypatch.setattr(ConstrainedState, "rules", rules)
    alone = [await tokens(engine, innocent(i)) for i in range(4)]
    call = SamplingParams(max_new_tokens=8, tools=(fn("ok_tool", {"b": {"type": "boolean"}}),),
                          tool_choice="required")
    call_alone = await tokens(engine, params=call)
    faulty = SamplingParams(max_new_tokens=8, tools=(fn("faulty", {"b": {"type": "boolean"}}),),
                            tool_choice="required")

    async def failing():
        with pytest.raises(RuntimeError, match="injected"):
            await tokens(engine, params=faulty)
        return "failed"

    results = await asyncio.gather(failing(), tokens(engine, params=call),
                                   *[tokens(engine, innocent(i)) for i in range(4)])
    assert results[0] == "failed"
    assert results[1] == call_alone
    assert results[2:] == alone


@pytest.mark.parametrize("overlap", [False, True], ids=["read_each_step", "overlap"])
async def test_a_failing_batched_pass_is_rerun_row_by_row(engine, monkeypatch, overlap):
    """A fault that breaks any pass containing one row (injected in the runner): the pass is
    re-run row by row, that row fails, the others decode their tokens unchanged. With overlap
    the step before the failing one, queued and not yet read, is read and delivered first."""
    long = SamplingParams(max_new_tokens=48, ignore_eos=True, decoding="fast",
                          policy="low_confidence", steps_per_block=2)  # a fixed schedule
    alone = [await tokens(engine, innocent(i), long) for i in range(4)]
    monkeypatch.setattr(engine, "overlap", overlap)
    overlapped = engine.overlapped_steps
    real = engine.runner.step
    poison_ids = set()

    def step(rows, block=None, read=True, wait=True):
        if any(r.request_id in poison_ids for r in rows):
            raise RuntimeError("injected fault in a batched pass")
        return real(rows, block, read, wait)

    monkeypatch.setattr(engine.runner, "step", step)
    running = asyncio.Event()

    async def streamed(i):
        out = []
        async for d in engine.generate(innocent(i), long):
            running.set()  # the innocents are decoding: the poison row joins their batch
            out.extend(d.token_ids)
        return out

    async def poisoned():
        await running.wait()
        poison_ids.add("poison-1")
        with pytest.raises(RuntimeError, match="injected"):
            async for _ in engine.generate([{"role": "user", "content": "poison row"}], PLAIN,
                                           request_id="poison-1"):
                pass
        return "failed"

    before = engine.isolated_passes
    results = await asyncio.gather(poisoned(), *[streamed(i) for i in range(4)])
    assert results[0] == "failed"
    assert results[1:] == alone
    assert engine.isolated_passes > before  # the batched pass did fail and was isolated
    assert (engine.overlapped_steps > overlapped) == overlap


# ------------------------------------------------------------ property-based: hostile schemas
@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(seed=st.integers(0, 2 ** 32 - 1))
def test_hostile_schemas_are_refused_or_served_and_disturb_nobody(engine, seed):
    """Every generated request is answered (tokens) or refused (ValueError: a 400), never
    another exception; a plain request decoded beside it gets its tokens unchanged."""
    rng = random.Random(seed)
    tools, choice, fmt = hostile_request(rng)
    try:
        params = SamplingParams(max_new_tokens=8, tools=tuple(tools), tool_choice=choice,
                                response_format=fmt)
    except ValueError:
        return  # refused at the API's own parameter checks
    who = innocent(seed % 7)

    async def both():
        alone = await tokens(engine, who)
        return alone, await asyncio.gather(outcome(engine, params), tokens(engine, who))

    alone, (hostile, beside) = asyncio.run(both())
    assert isinstance(hostile, list | ValueError)
    assert beside == alone
