"""The clarify guard at run time (agent/guard.py): on engine deltas, in the voice
pipeline's DiffusionLLMService (pipecat run_test) and in the OpenAI API (TestClient), with the
shipped receptionist model and its tools (the product path). Low first-block confidence -> the
clarifying question, decided by the engine's own confidence (measured in the test); a confident
answer passes through unchanged; the off switch passes the raw reply; a reply that is not
well-formed is caught in whole-reply mode, after a careful retry (one token per pass) that is said
instead when it agrees with the blend."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from pipecat.frames.frames import LLMContextFrame, LLMTextFrame
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.tests.utils import run_test
from voice_fixtures import RouterConfig as _Config

from diffvoice.agent.clarify import CLARIFY
from diffvoice.agent.guard import ClarifyGuard, ClarifyRecord, clarify_guard_for
from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig, SamplingParams
from diffvoice.engine.engine import Delta

HAS_MODEL = (DEFAULT_MODEL_DIR / "model.safetensors").is_file()
UNSURE = "hours price"  # first block unsure (v3: 0.26): "On Tuesdays we're open from 8 am to 5 pm."
SURE = "how much is a crown"    # "A crown is 900 dollars."
BLENDED = "phone price"  # v3 blends: "Our front which answers at 555 0142 during opening hours."


async def _aiter(items):
    for item in items:
        yield item


async def _collect(guard, deltas, **kw):
    aborted = []
    record = ClarifyRecord()
    out = [d async for d in guard.wrap(_aiter(deltas), abort=lambda: aborted.append(1),
                                       record=record, **kw)]
    return out, aborted, record


def _deltas(texts, conf, reason="stop"):
    return [Delta("r", t, [], i == len(texts) - 1, reason if i == len(texts) - 1 else None,
                  first_block_confidence=conf) for i, t in enumerate(texts)]


WELL_FORMED = {"A crown is 900 dollars."}.__contains__


async def test_guard_on_deltas():
    streaming = ClarifyGuard(0.5, WELL_FORMED, whole_reply=False)
    held = ClarifyGuard(0.5, WELL_FORMED, whole_reply=True)
    sure = _deltas(["A crown ", "is 900 dollars."], 0.9)
    out, aborted, rec = await _collect(streaming, sure)
    assert out == sure and not aborted and not rec.clarified  # unchanged, delta for delta
    out, aborted, rec = await _collect(held, sure)
    assert [d.text for d in out] == ["A crown is 900 dollars."] and out[-1].finished
    unsure = _deltas(["A crown ", "is 900 dollars."], 0.3)
    out, aborted, rec = await _collect(streaming, unsure)
    assert [d.text for d in out] == [CLARIFY] and out[0].finished and aborted == [1]
    assert rec.clarified and rec.reason == "first_block" and rec.first_block_confidence == 0.3
    out, aborted, rec = await _collect(streaming, unsure, first_block=False)
    assert out == unsure and not rec.clarified
    blend = _deltas(["We take walk, ", "fillings we can."], 0.9)
    out, _, rec = await _collect(streaming, blend)  # streaming: only the first-block test
    assert out == blend
    out, aborted, rec = await _collect(held, blend)
    assert [d.text for d in out] == [CLARIFY] and rec.reason == "not_well_formed"
    call = [Delta("r", "", [], False), Delta("r", "", [], True, "tool_calls", tool_call={
        "name": "book_appointment", "arguments": "{}"})]
    out, _, rec = await _collect(held, call)
    assert out == call and not rec.clarified
    with pytest.raises(ValueError, match="clarify_below"):
        ClarifyGuard(1.5, WELL_FORMED)


async def test_careful_retry_of_a_blend():
    """Whole-reply mode with `retry`: a blend is decoded once more and the retry is said when it
    is well-formed, agrees with the blend and is confident; otherwise the question. Never for a
    well-formed reply or in streaming mode; the retry stream is always closed."""
    held = ClarifyGuard(0.5, WELL_FORMED, whole_reply=True)
    blend = _deltas(["A crown is ", "900 dolla dollars."], 0.9)
    started, closed = [], []

    def retry_with(deltas):
        async def stream():
            started.append(1)
            try:
                for d in deltas:
                    yield d
            finally:
                closed.append(1)
        return stream

    out, aborted, rec = await _collect(held, blend, retry=retry_with(
        _deltas(["A crown is 900 dollars."], 0.8)))
    assert [d.text for d in out] == ["A crown is 900 dollars."] and out[-1].finished
    assert rec.retried and not rec.clarified and not aborted and closed == [1]
    cases = [  # (retry deltas, why the question stays)
        (_deltas(["We're open 8 am to 5 pm."], 0.9), "a different answer"),
        (_deltas(["A crown is 900 dollars."], 0.3), "an unsure retry"),
        (_deltas(["A crown is 900 dolla dollars."], 0.9), "a blend again"),
        ([Delta("r", "", [], True, "tool_calls", tool_call={"name": "x", "arguments": "{}"})],
         "a call"),
        (_deltas(["A crown is 900 dollars."], 0.9, reason="abort"), "an aborted retry"),
    ]
    for deltas, why in cases:
        out, _, rec = await _collect(held, blend, retry=retry_with(deltas))
        assert [d.text for d in out] == [CLARIFY], why
        assert rec.clarified and not rec.retried and rec.reason == "not_well_formed", why
    assert len(closed) == len(started) == 1 + len(cases)
    sure = _deltas(["A crown ", "is 900 dollars."], 0.9)
    out, _, rec = await _collect(held, sure, retry=retry_with(sure))
    streaming = ClarifyGuard(0.5, WELL_FORMED, whole_reply=False)
    out2, _, _ = await _collect(streaming, blend, retry=retry_with(sure))
    assert out2 == blend and len(started) == 1 + len(cases)  # neither was retried
    assert [d.text for d in out] == ["A crown is 900 dollars."] and not rec.retried
    # the retry is "fast"-decoded: its first block is tested even when the first decode's was not
    out, _, rec = await _collect(held, blend, first_block=False, retry=retry_with(
        _deltas(["A crown is 900 dollars."], 0.3)))
    assert [d.text for d in out] == [CLARIFY] and not rec.retried


def _after(name, args, result):
    return [{"role": "user", "content": "book me a cleaning friday at ten, ann lee"},
            {"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function",
             "function": {"name": name, "arguments": json.dumps(args)}}]},
            {"role": "tool", "tool_call_id": "c0", "content": json.dumps(result)}]


async def test_after_a_tool_result_an_unsure_reply_becomes_the_trained_result_reply():
    """After a tool result the replacement is the sentence the training flows give for that
    call and result (not the generic question, a non-sequitur after a booking); anything the
    flows do not know falls back to the question."""
    if not HAS_MODEL:
        pytest.skip("models/receptionist-tiny not present")
    guard = clarify_guard_for(_Config())
    args = {"service": "cleanings", "day": "friday", "time": "10:00", "name": "Ann Lee"}
    flows = guard.result_reply.__self__
    cases = [
        (_after("book_appointment", args, {"booked": True}),
         flows.book_result_reply(args, {"booked": True})),
        (_after("book_appointment", args, {"booked": False, "alternatives": ["10:30"]}),
         flows.book_result_reply(args, {"booked": False, "alternatives": ["10:30"]})),
        (_after("check_availability", {"service": "cleanings", "day": "friday", "time": None},
                {"available": ["09:00", "09:30"]}), None),
        (_after("cancel_appointment", {"name": "Ann Lee", "day": "friday"}, {"cancelled": True}),
         "Your Friday appointment is cancelled."),
        (_after("book_appointment", args, {"error": "calendar unavailable"}), flows.error_reply()),
        (_after("book_appointment", {"day": "friday"}, {"booked": True}), CLARIFY),  # no time
        (_after("unknown_tool", args, {"booked": True}), CLARIFY),
        ([{"role": "user", "content": "hi"}], CLARIFY),
        (_after("book_appointment", args, {"booked": True})[:2]
         + [{"role": "tool", "content": "not json"}], CLARIFY),
    ]
    for messages, want in cases:
        out, aborted, rec = await _collect(guard, _deltas(["Sorryh we ", "book would?"], 0.2),
                                           messages=messages)
        text = out[-1].text
        assert rec.clarified and rec.question == text and aborted == [1]
        if want is None:  # availability: the flows' own sentence, naming the free times
            assert text != CLARIFY and "9" in text and flows.is_flow_reply(text)
        else:
            assert text == want
    assert "booked" in cases[0][1] and "10" in cases[0][1]


async def test_the_held_reply_is_grounded_before_it_is_spoken():
    """A confident, well-shaped reply that restates a value nobody said is mended in whole-reply
    mode (agent.grounding); a streamed reply is already spoken and is left alone."""
    if not HAS_MODEL:
        pytest.skip("models/receptionist-tiny not present")
    guard = clarify_guard_for(_Config())
    asked = [{"role": "user", "content": "let me book a kids checkup thursday at 3:30 p.m."}]
    said = "And what name should I put a kids checkup on Thursday at 1:30 pm under?"
    out, aborted, rec = await _collect(guard, _deltas([said[:20], said[20:]], 0.95),
                                       messages=asked)
    assert [d.text for d in out] == [said.replace("1:30", "3:30")] and out[-1].finished
    assert rec.grounding == "substituted" and not rec.clarified and not aborted
    args = {"service": "cleanings", "day": "friday", "time": "10:00", "name": "Ann Lee"}
    flows = guard.result_reply.__self__
    right = flows.book_result_reply(args, {"booked": True})
    out, _, rec = await _collect(guard, _deltas([right.replace("10 am", "11 am")], 0.95),
                                 messages=_after("book_appointment", args, {"booked": True}))
    assert [d.text for d in out] == [right] and rec.grounding == "replaced"
    out, _, rec = await _collect(guard, _deltas([right], 0.95),
                                 messages=_after("book_appointment", args, {"booked": True}))
    assert [d.text for d in out] == [right] and rec.grounding is None
    # a slot question stating a time nobody said: the question for what the call lacks
    invented = "Sure, what would you like to come in for on Wednesday at 12 pm?"
    out, _, rec = await _collect(guard, _deltas([invented], 0.95), messages=[
        {"role": "user", "content": "can i book something on wednesday, i'm felix ortiz"}])
    assert [d.text for d in out] == ["Sure, what would you like to come in for on Wednesday?"]
    assert rec.grounding == "replaced" and not rec.clarified
    streaming = ClarifyGuard(
        guard.threshold, guard.is_well_formed, whole_reply=False,
        is_flow_reply=guard.is_flow_reply)
    out, _, rec = await _collect(streaming, _deltas([said], 0.95), messages=asked)
    assert [d.text for d in out] == [said] and rec.grounding is None


async def test_mid_booking_an_unsure_reply_becomes_the_next_slot_question():
    if not HAS_MODEL:
        pytest.skip("models/receptionist-tiny not present")
    guard = clarify_guard_for(_Config())
    msgs = [{"role": "user", "content": "i need a cleaning on friday"},
            {"role": "assistant",
             "content": "What time on Friday would you like to come in for a cleaning?"},
            {"role": "user", "content": "at ten in the morning please"}]
    out, aborted, rec = await _collect(guard, _deltas(["Sorryh we ", "book would?"], 0.2),
                                       messages=msgs)
    assert rec.clarified and aborted == [1]
    assert out[-1].text == "And what name should I put a cleaning on Friday at 10 am under?"
    out, _, rec = await _collect(guard, _deltas(["Sorryh we ", "book would?"], 0.2),
                                 messages=msgs[:1])
    assert out[-1].text == CLARIFY  # not in a booking yet: the hours-or-prices question


def test_guard_from_config(tmp_path):
    assert clarify_guard_for(_Config(clarify="off")) is None
    assert clarify_guard_for(_Config(model=str(tmp_path))) is None  # auto: no facts.yaml
    with pytest.raises(ValueError, match="facts.yaml"):
        clarify_guard_for(_Config(model=str(tmp_path), clarify="on"))
    if HAS_MODEL:
        guard = clarify_guard_for(_Config(clarify_below=0.3))
        assert guard.threshold == 0.3 and guard.whole_reply
        assert guard.is_well_formed("A crown is 900 dollars.")
        assert not guard.is_well_formed("Sorryh we service would you like?v")


def _guard_of_default():
    return clarify_guard_for(_Config())


@pytest.fixture(scope="module")
def receptionist(tmp_path_factory):
    if not HAS_MODEL:
        pytest.skip("models/receptionist-tiny not present")
    from diffvoice.agent.tools import ReceptionistTools

    tools = ReceptionistTools.for_model(DEFAULT_MODEL_DIR, db_path=tmp_path_factory.mktemp(
        "clarify") / "book.sqlite3")
    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(max_running=2))
    yield engine, tools
    engine.close()


async def _engine_reply(engine, question, tools):
    text, conf = "", None
    params = SamplingParams(max_new_tokens=48, tools=tuple(tools.schemas))
    async for d in engine.generate([{"role": "user", "content": question}], params):
        text += d.text
        conf = d.first_block_confidence if d.first_block_confidence is not None else conf
    return text, conf


async def test_voice_service_asks_when_the_engine_is_unsure(receptionist):
    from diffvoice.voice.llm_service import DiffusionLLMService

    engine, tools = receptionist
    unsure_text, unsure_conf = await _engine_reply(engine, UNSURE, tools)
    sure_text, sure_conf = await _engine_reply(engine, SURE, tools)
    assert unsure_conf < 0.5 <= sure_conf, (unsure_conf, sure_conf)  # the engine's own measure
    guard = ClarifyGuard(0.5, None, whole_reply=False)  # the first-block test alone

    async def spoken(question, clarify):
        llm = DiffusionLLMService(engine, system_prompt=None, max_new_tokens=48, clarify=clarify)
        context = LLMContext(messages=[{"role": "user", "content": question}],
                             tools=tools.tools_schema())
        down, _ = await run_test(llm, frames_to_send=[LLMContextFrame(context)])
        return "".join(f.text for f in down if isinstance(f, LLMTextFrame)), llm.last_clarify

    text, record = await spoken(UNSURE, guard)
    assert text == CLARIFY and record.clarified and record.reason == "first_block"
    text, record = await spoken(SURE, guard)
    assert text == sure_text and not record.clarified  # passes through unchanged
    text, record = await spoken(UNSURE, None)  # guard off: the raw (blended) reply
    assert text == unsure_text and record is None
    # whole-reply guard: a blend is decoded again one token per pass and the agreeing retry said
    text, record = await spoken("is this a real receptionist", _guard_of_default())
    assert text == "I'm a virtual assistant, but I can help with our hours, prices, and bookings."
    assert record.retried and not record.clarified


def test_openai_api_asks_when_the_engine_is_unsure(receptionist):
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from diffvoice.voice.openai_api import make_router

    engine, tools = receptionist

    @dataclass
    class _State:
        engine: Engine
        config: _Config

    def ask(config, question, **extra):
        app = FastAPI()
        app.include_router(make_router(_State(engine, config)))
        with TestClient(app) as client:
            r = client.post("/v1/chat/completions", json={
                "model": engine.model_name, "tools": tools.schemas, "max_tokens": 48,
                "messages": [{"role": "user", "content": question}], **extra})
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["message"]["content"], r.headers

    text, headers = ask(_Config(), UNSURE)
    assert text == CLARIFY and headers["x-diffvoice-clarified"] == "first_block"
    text, headers = ask(_Config(), SURE)
    assert text == "A crown is 900 dollars." and "x-diffvoice-clarified" not in headers
    text, headers = ask(_Config(clarify="off"), UNSURE)
    assert text != CLARIFY and "x-diffvoice-clarified" not in headers
    # threshold 0: only the whole-reply test; a blend is still not well-formed
    text, headers = ask(_Config(clarify_below=0.0), BLENDED)
    assert text == CLARIFY and headers["x-diffvoice-clarified"] == "not_well_formed"
    # a restated time nobody said is mended, and the response says so (v3 says "1:30 pm")
    text, headers = ask(_Config(), "let me book a kids checkup sometime thursday at roughly "
                                   "3:30 p.m.")
    assert text == "And what name should I put a kids checkup on Thursday at 3:30 pm under?"
    assert headers["x-diffvoice-grounded"] == "substituted"
    text, headers = ask(_Config(), SURE)
    assert "x-diffvoice-grounded" not in headers
    # a blend whose careful retry (one token per pass) agrees with it is answered by the retry
    # (v3 first says "I'm a virtual assistant virtual but I can help with our hours hours ...")
    blended = "is this a real receptionist"
    raw, _ = ask(_Config(clarify="off"), blended)
    text, headers = ask(_Config(), blended)
    assert raw != text and not _guard_of_default().is_well_formed(raw), raw
    assert text == "I'm a virtual assistant, but I can help with our hours, prices, and bookings."
    assert headers["x-diffvoice-retried"] == "careful" and "x-diffvoice-clarified" not in headers
    # ignore_eos asks for exactly max_tokens raw tokens (a benchmark): never replaced
    body = ask(_Config(clarify_below=0.0), BLENDED, ignore_eos=True, max_tokens=16)
    assert body[0] != CLARIFY and "x-diffvoice-clarified" not in body[1]
