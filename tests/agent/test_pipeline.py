"""The agent's rules in one pipeline (agent.pipeline): serve() walks a request through every
BEFORE and AFTER rule in order (the shipped receptionist's rules, a scripted engine), runs the
BEFORE rules off the event loop and survives a broken one, and is the one runner that the voice
service, the OpenAI API and eval-model all answer through."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable

import pytest

from diffvoice.agent import pipeline
from diffvoice.agent.clarify import CLARIFY
from diffvoice.agent.guard import ClarifyRecord
from diffvoice.agent.pipeline import BEFORE, Agent, serve
from diffvoice.engine import DEFAULT_MODEL_DIR, SamplingParams
from diffvoice.engine.engine import Delta

CAREFUL = 99  # steps_per_block of the scripted engine's careful decode


class ScriptedEngine:
    """An engine whose reply to the messages it is asked is `script(messages, careful)`:
    [(text, first-block confidence)] deltas, the last one finished."""

    default_decoding = "fast"

    def __init__(self, script: Callable[[list[dict], bool], list[tuple[str, float]]]):
        self.script = script
        self.asked: list[tuple[list[dict], bool, str]] = []
        self.aborted: list[str] = []
        self.priorities: list[int] = []

    def careful_params(self, params):
        return dataclasses.replace(params, steps_per_block=CAREFUL)

    async def generate(self, messages, params, request_id=None, priority=0, client=None):
        careful = params.steps_per_block == CAREFUL
        self.asked.append((messages, careful, request_id))
        self.priorities.append(priority)
        parts = self.script(messages, careful)
        for i, (text, conf) in enumerate(parts):
            last = i == len(parts) - 1
            yield Delta(request_id, text, [], last, "stop" if last else None,
                        first_block_confidence=conf)

    def abort(self, request_id):
        self.aborted.append(request_id)


@pytest.fixture(scope="module")
def agent():
    if not (DEFAULT_MODEL_DIR / "model.safetensors").is_file():
        pytest.skip("the shipped receptionist model is not in this checkout")
    return Agent.for_model(DEFAULT_MODEL_DIR)


async def _serve(agent, engine, messages, **kw):
    record = ClarifyRecord()
    out = [d async for d in serve(agent, engine, messages, SamplingParams(decoding="fast"),
                                  request_id="r1", record=record, **kw)]
    return "".join(d.text for d in out), record


def _user(text):
    return [{"role": "user", "content": text}]


def _later(*turns):
    roles = ["user", "assistant"] * len(turns)
    return [{"role": r, "content": t} for r, t in zip(roles, turns, strict=False)]


async def test_a_request_walks_through_every_rule_in_order(agent):
    assert [type(r) for r in agent.before] == list(BEFORE)
    sure = ScriptedEngine(lambda m, careful: [("A crown ", 0.9), ("is 900 dollars.", 0.9)])

    async def asked(messages):
        sure.asked.clear()
        text, record = await _serve(agent, sure, messages)
        assert text == "A crown is 900 dollars." and not record.clarified
        return sure.asked[0][0][-1]["content"]

    # BEFORE 1 SlotAnswer: the answer to the agent's slot question is heard as its value
    name_q = "And what name should I put a crown on Tuesday at 4 pm under?"
    said = _later("i'd like to book a crown on tuesday at 4 pm", name_q, "that would be ivy quinn")
    assert await asked(said) == "ivy quinn"
    # BEFORE 2 FollowUp: a later turn naming no service becomes a training follow-up
    follow = _later("how much is a cleaning", "A cleaning is 95 dollars.", "duration")
    heard = await asked(follow)
    assert heard != "duration" and heard in {e.text for e in agent.before[1].snap.entries}
    # BEFORE 3 LaterTurnKept: any other later turn keeps its words (it needs its context)
    kept = _later("how much is a crown", "A crown is 900 dollars.", "do you guys take apple pay")
    assert await asked(kept) == "do you guys take apple pay"
    # BEFORE 4 FirstTurnSnap: a first turn is heard as the nearest training question
    snapped = await asked(_user("do you guys take apple pay"))
    assert snapped != "do you guys take apple pay" and "pay" in snapped
    assert await asked(_user("the quarterly tax filing deadline")) == \
        "the quarterly tax filing deadline"  # nothing close: as said

    # AFTER 1 FirstBlockConfidence: unsure -> aborted, the replacement instead, nothing else
    unsure = ScriptedEngine(lambda m, careful: [("A crown ", 0.2), ("is 900 dollars.", 0.2)])
    text, record = await _serve(agent, unsure, _user("how much is a crown"))
    assert text == CLARIFY and record.reason == "first_block" and unsure.aborted == ["r1"]
    # AFTER 2 Grounding: a flow reply stating a time nobody said is mended
    misheard = "And what name should I put a kids checkup on Thursday at 1:30 pm under?"
    flow = ScriptedEngine(lambda m, careful: [(misheard, 0.9)])
    text, record = await _serve(agent, flow, _user(
        "let me book a kids checkup thursday at 3:30 p.m."))
    assert text == misheard.replace("1:30 pm", "3:30 pm") and record.grounding == "substituted"
    # AFTER 3 WellFormed + 4 CarefulRetry: a blend is decoded again, one token per pass; an
    # agreeing, well-formed, sure retry is said
    blend = ScriptedEngine(lambda m, careful: [(
        "A crown is 900 dollars." if careful else "A crown is 900 dolla dollars.", 0.9)])
    text, record = await _serve(agent, blend, _user("how much is a crown"))
    assert text == "A crown is 900 dollars." and record.retried and not record.clarified
    assert [c for _, c, _ in blend.asked] == [False, True]
    assert blend.asked[1][2] == "r1-careful"
    # AFTER 5 Replacement: a blend whose retry blends again -> the clarifying question; after a
    # tool result, the trained result reply
    again = ScriptedEngine(lambda m, careful: [("A crown is 900 dolla dollars.", 0.9)])
    text, record = await _serve(agent, again, _user("how much is a crown"))
    assert text == CLARIFY and record.reason == "not_well_formed" and not record.retried
    # a tool call passes every AFTER rule unchanged
    call = {"name": "check_availability", "arguments": "{}"}

    class Calling(ScriptedEngine):
        async def generate(self, messages, params, request_id=None):
            yield Delta(request_id, "", [], True, "tool_calls", tool_call=call,
                        first_block_confidence=0.9)

    calling = Calling(None)
    out = [d async for d in serve(agent, calling, _user("any time friday"),
                                  SamplingParams(decoding="fast"), request_id="r2")]
    assert out[-1].tool_call == call


async def test_without_a_rule_it_is_off(agent):
    from diffvoice.agent.paraphrase import ParaphraseSnap

    snap = agent.before[0].snap
    assert isinstance(snap, ParaphraseSnap)
    no_snap = Agent.of(snap, None, without=("first_turn_snap",))
    assert [r.name for r in no_snap.before] == ["slot_answer", "follow_up", "later_turn_kept"]
    first = _user("do you guys take apple pay")
    assert no_snap.rewrite(first) is first
    assert Agent().rewrite(first) is first  # no rules: as sent


async def test_the_before_rules_run_off_the_loop_and_a_broken_one_changes_nothing():
    seen = []

    def longer(turn):
        seen.append(threading.current_thread() is threading.main_thread())
        return turn.said("a much longer question " * 4)

    def broken(turn):
        raise RuntimeError("encoder gone")

    engine = ScriptedEngine(lambda m, careful: [("ok", 0.9)])
    await _serve(Agent(before=[longer]), engine, _user("hi"))
    assert engine.asked[-1][0][-1]["content"].startswith("a much longer") and seen == [False]
    await _serve(Agent(before=[broken, longer]), engine, _user("hi"))
    assert engine.asked[-1][0] == _user("hi")  # the first rule raised: the messages as sent
    # an over-long request is refused as sent: no rule reads it (a snap would turn it into a
    # short training question and the request would be accepted)
    seen.clear()
    too_long = _user("x" * (pipeline.MAX_RULE_CHARS + 1))
    await _serve(Agent(before=[longer]), engine, too_long)
    assert seen == [] and engine.asked[-1][0] == too_long


async def test_voice_api_and_eval_answer_through_the_same_serve(agent, monkeypatch, tmp_path):
    """The voice service, the OpenAI route and eval-model's questions all call
    agent.pipeline.serve (counted by wrapping it); the call's turn asks the engine at priority 0,
    the API's request at priority 1 (behind live calls, engine.scheduler)."""
    calls: list[str] = []
    real = pipeline.serve

    def counted(*args, **kwargs):
        calls.append(kwargs["request_id"])
        return real(*args, **kwargs)

    monkeypatch.setattr(pipeline, "serve", counted)
    engine = ScriptedEngine(lambda m, careful: [("A crown is 900 dollars.", 0.9)])

    # the voice service (pipecat)
    from pipecat.frames.frames import LLMContextFrame, LLMTextFrame
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.tests.utils import run_test

    from diffvoice.voice.llm_service import DiffusionLLMService

    llm = DiffusionLLMService(engine, system_prompt=None, agent=agent)
    context = LLMContext(messages=_user("how much is a crown"))
    down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(context)])
    assert "".join(f.text for f in down if isinstance(f, LLMTextFrame)) == \
        "A crown is 900 dollars."
    assert len(calls) == 1 and llm.last_clarify is not None

    # the OpenAI-compatible API
    from types import SimpleNamespace

    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.openai_api import make_router

    engine.model_name = "receptionist-tiny"
    state = SimpleNamespace(engine=engine, config=ServeConfig(model=str(DEFAULT_MODEL_DIR)),
                            agent=agent)
    app = FastAPI()
    app.include_router(make_router(state))
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json={
            "model": "receptionist-tiny", "messages": _user("how much is a crown")})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "A crown is 900 dollars."
    assert len(calls) == 2 and calls[-1].startswith("chatcmpl-")
    assert engine.priorities == [0, 1]

    # eval-model's questions (agent.train.asking, what evaluate and episodes call)
    from diffvoice.agent.train.asking import ask

    engine.config = SimpleNamespace(max_prompt_chars=10_000)
    asked = await ask(agent, engine, _user("how much is a crown"),
                      SamplingParams(decoding="fast"))
    assert asked.final == asked.text == "A crown is 900 dollars."
    assert len(calls) == 3 and calls[-1].startswith("eval-")


def test_the_pipeline_order_is_the_documented_one():
    doc = pipeline.__doc__
    names = [cls.__name__ for cls in BEFORE]
    assert [doc.index(f"{i}. {n}") for i, n in enumerate(names, 1)] == sorted(
        doc.index(f"{i}. {n}") for i, n in enumerate(names, 1))


def test_eval_leaves_out_the_rules_it_is_told_to():
    """`diffvoice eval-model --without RULE` (the ablation): each name switches one rule off."""
    from diffvoice.agent.data import DataGenerator
    from diffvoice.agent.facts import DEFAULT_FACTS_PATH, load_facts
    from diffvoice.agent.train.asking import RULES, eval_agent

    gen = DataGenerator(load_facts(DEFAULT_FACTS_PATH))
    assert set(RULES) == {r.name for r in BEFORE} | set(pipeline.AFTER)
    every = eval_agent(gen, None, 0.5)
    assert every.guard.threshold == 0.5 and every.guard.whole_reply and every.guard.retry
    assert every.guard.is_flow_reply is not None
    assert eval_agent(gen, None, 0.5, without=("first_block",)).guard.threshold == 0.0
    assert not eval_agent(gen, None, 0.5, without=("well_formed",)).guard.whole_reply
    assert eval_agent(gen, None, 0.5, without=("grounding",)).guard.is_flow_reply is None
    assert not eval_agent(gen, None, 0.5, without=("careful_retry",)).guard.retry
    assert eval_agent(gen, None, 0.5, without=("replacement",)).guard is None
    with pytest.raises(ValueError, match="unknown rule"):
        eval_agent(gen, None, 0.5, without=("paraphrase",))
