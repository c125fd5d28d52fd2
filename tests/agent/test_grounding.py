"""Grounding of booking-flow replies (agent/grounding.py): the values a reply restates
must come from the conversation; every reply the flows themselves write passes unchanged."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from diffvoice.agent.data import DataGenerator
from diffvoice.agent.facts import load_facts
from diffvoice.agent.grounding import ground, stated_days, stated_times

FACTS = Path(__file__).resolve().parents[2] / "models" / "receptionist-tiny" / "facts.yaml"


@pytest.fixture(scope="module")
def gen():
    return DataGenerator(load_facts(FACTS))


def _ground(gen, text, messages):
    return ground(text, messages, gen.dialogues.is_flow_reply, gen.dialogues.result_reply)


def test_every_flow_reply_of_the_generator_is_left_as_written(gen):
    rng = random.Random(5)
    seen = 0
    for split in ("train", "heldout"):
        for _ in range(1500):
            turn = gen.dialogues.sample(rng, split)
            if turn.call is not None:
                continue
            ex = gen.from_turn(turn, "t")
            assert _ground(gen, ex.answer, ex.messages()) == (ex.answer, None), ex.messages()
            seen += 1
    assert seen > 1500


def test_fact_sheet_answers_are_never_touched(gen):
    # opening hours state times nobody said: not a flow reply, so not grounded
    messages = [{"role": "user", "content": "when are you open on friday"}]
    answers = gen.all_answers()
    assert any(stated_times(a) for a in answers)
    for answer in answers:
        assert _ground(gen, answer, messages) == (answer, None)


def test_a_misheard_time_is_replaced_by_the_one_the_caller_said(gen):
    messages = [{"role": "user", "content": "let me book a kids checkup thursday at 3:30 p.m."}]
    reply = "And what name should I put a kids checkup on Thursday at 1:30 pm under?"
    assert gen.dialogues.is_flow_reply(reply)
    text, how = _ground(gen, reply, messages)
    assert (text, how) == (reply.replace("1:30 pm", "3:30 pm"), "substituted")


def test_a_time_said_without_am_pm_takes_the_daytime_reading(gen):
    messages = [{"role": "user", "content": "a filling on saturday at half past twelve"}]
    reply = "And what name should I put a filling on Saturday at 1:30 am under?"
    assert _ground(gen, reply, messages) == (reply.replace("1:30 am", "12:30 pm"), "substituted")


def test_a_wrong_day_is_replaced_and_a_right_one_kept(gen):
    messages = [{"role": "user", "content": "can i get a cleaning on tuesday at 10 am"}]
    right = "And what name should I put a cleaning on Tuesday at 10 am under?"
    assert _ground(gen, right, messages) == (right, None)
    wrong = right.replace("Tuesday", "Thursday")
    assert _ground(gen, wrong, messages) == (right, "substituted")


def test_two_candidates_leave_the_reply_and_say_so(gen):
    messages = [{"role": "user", "content": "a cleaning at 10 am"},
                {"role": "assistant", "content": "Sure, what day would you like?"},
                {"role": "user", "content": "monday or tuesday, either"}]
    reply = "And what name should I put a cleaning on Friday at 10 am under?"
    assert _ground(gen, reply, messages) == (reply, "ungrounded")
    # with the flows' next question to fall back on: the question for what is still missing
    assert ground(reply, messages, gen.dialogues.is_flow_reply, gen.dialogues.result_reply,
                  gen.dialogues.next_question) == (
        "Sure, what day would you like to come in for a cleaning at 10 am?", "replaced")


def test_a_question_stating_a_time_nobody_said_asks_for_what_is_missing(gen):
    """The caller gave a day and a name, no time and no service; the model asked "... on
    Wednesday at 12 pm?" (v3, closed-loop episode): the 12 pm goes, the question stays."""
    messages = [{"role": "user", "content": "sign me up for an appointment please for this "
                                            "coming wednesday and i'm felix ortiz"}]
    reply = "Sure, what would you like to come in for on Wednesday at 12 pm?"
    assert ground(reply, messages, gen.dialogues.is_flow_reply, gen.dialogues.result_reply,
                  gen.dialogues.next_question) == (
        "Sure, what would you like to come in for on Wednesday?", "replaced")


def test_after_a_tool_result_a_misstated_confirmation_becomes_the_trained_one(gen):
    args = {"service": "cleanings", "day": "thursday", "time": "12:00", "name": "felix quinn"}
    messages = [
        {"role": "user", "content": "book a cleaning thursday at noon for felix quinn"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function",
            "function": {"name": "book_appointment", "arguments": json.dumps(args)}}]},
        {"role": "tool", "content": json.dumps({"booked": True})}]
    right = gen.dialogues.book_result_reply(args, {"booked": True})
    assert _ground(gen, right, messages) == (right, None)
    wrong = right.replace("12 pm", "10 am")
    assert wrong != right
    assert _ground(gen, wrong, messages) == (right, "replaced")
    # without a result reply to fall back on, the reply is only reported
    assert ground(wrong, messages, gen.dialogues.is_flow_reply) == (wrong, "ungrounded")


def test_stated_values_read_the_flows_spoken_forms():
    assert [t for t, _ in stated_times("we have 12:30 pm, 2 pm, or 11 am free")] == [
        "12:30", "14:00", "11:00"]
    assert [t for t, _ in stated_times("at 12 am")] == ["00:00"]
    assert [d for d, _ in stated_days("On Friday or monday")] == ["friday", "monday"]


def test_mid_booking_the_fallback_is_the_next_slot_question(gen):
    d = gen.dialogues
    msgs = [{"role": "user", "content": "could i schedule a kids checkup on tuesday"},
            {"role": "assistant",
             "content": "What time on Tuesday would you like to come in for a kids checkup?"},
            {"role": "user", "content": "at 3:30 p.m."}]
    assert d.slot_question(msgs) == \
        "And what name should I put a kids checkup on Tuesday at 3:30 pm under?"
    assert d.slot_question(msgs[:1]) is None  # no booking question asked yet
    assert d.slot_question(msgs + [{"role": "assistant", "content": "A crown is 900 dollars."},
                                   {"role": "user", "content": "ok"}]) is None
    # every slot known: the model should have called; no question to fall back on
    named = msgs + [{"role": "assistant", "content": d.ask(
        {"service": "kids checkups", "day": "tuesday", "time": "15:30"})},
        {"role": "user", "content": "my name is ivy hayes"}]
    assert d.slot_question(named) is None
    # on the generator's own slot-filling turns it asks what the flows ask (the few others keep
    # a slot the flows drop: "... at 8:30 am" after the caller gave the day)
    rng, same, total = random.Random(3), 0, 0
    for _ in range(1500):
        turn = d.sample(rng, "heldout", "slot_fill")
        ex = gen.from_turn(turn, "t")
        if turn.call is None and ex.messages()[-1]["role"] == "user":
            question = d.slot_question(ex.messages())
            assert question is None or d.is_flow_reply(question)
            same += question == turn.reply
            total += question is not None
    assert total > 300 and same / total > 0.95, (same, total)
