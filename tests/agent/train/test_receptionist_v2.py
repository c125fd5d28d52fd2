"""Receptionist v2 data: tool wire format, booking dialogues, the multi-turn chat template, derived
fact-sheet fields, the independent evaluation set (never in training), the clarify guard and the
engine's first-block confidence."""

import asyncio
import json
import random

import pytest
import yaml

from diffvoice.agent.clarify import agrees
from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.dialogues import (
    ANSWER_NAME,
    BOOK_VERBS,
    FIRST,
    FIRST_HELD,
    LAST,
    LAST_HELD,
    say_time,
)
from diffvoice.agent.facts import DEFAULT_FACTS_PATH, load_facts, parse_facts
from diffvoice.agent.tool_schemas import (
    parse_tool_call,
    slot_times,
    spoken_time,
    tool_call_text,
    tool_schemas,
    validate_args,
)
from diffvoice.agent.train.evaluate import score
from diffvoice.agent.train.independent import (
    independent_examples,
    load_independent,
    training_overlap,
)
from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.engine.tokenizer import ChatTokenizer
from diffvoice.engine.train.build_tokenizer import TOOL_TOKENS, train_tokenizer


@pytest.fixture(scope="module")
def gen():
    return DataGenerator(load_facts())


def test_tool_call_wire_text_is_the_agreed_hermes_format(gen):
    schemas = tool_schemas(gen.facts)
    text = tool_call_text("book_appointment", {"name": "ann lee", "time": "10:00",
                                               "service": "cleanings", "day": "friday"}, schemas)
    assert text == ('<tool_call>\n{"name": "book_appointment", "arguments": {"service": '
                    '"cleanings", "day": "friday", "time": "10:00", "name": "ann lee"}}\n'
                    '</tool_call>')
    avail = tool_call_text("check_availability", {"service": "crowns", "day": "monday"}, schemas)
    assert '"time": null}}' in avail  # a missing optional value is null, never absent
    name, args = parse_tool_call(text)
    assert name == "book_appointment" and validate_args(name, args, schemas)
    assert not validate_args(name, {**args, "service": "haircut"}, schemas)
    assert not validate_args(name, {**args, "time": "9am"}, schemas)
    assert not validate_args(name, {k: v for k, v in args.items() if k != "name"}, schemas)
    assert parse_tool_call("<tool_call>\n{not json}\n</tool_call>") is None
    with pytest.raises(ValueError, match="unknown tool"):
        tool_call_text("order_pizza", {}, schemas)
    assert [spoken_time(t) for t in ("08:00", "12:00", "14:30", "00:15")] == [
        "8 am", "12 pm", "2:30 pm", "12:15 am"]
    assert slot_times("9 am to 11 am") == ["09:00", "09:30", "10:00", "10:30"]
    assert slot_times("closed") == []


def test_dialogue_replies_are_well_formed_and_calls_validate(gen):
    rng = random.Random(3)
    schemas = tool_schemas(gen.facts)
    kinds = set()
    for _ in range(3000):
        ex = gen.from_turn(gen.dialogues.sample(rng, "train"), "t")
        kinds.add(ex.intent)
        assert gen.is_well_formed(ex.answer), ex
        if ex.call is not None:
            parsed = parse_tool_call(ex.answer)
            assert parsed and validate_args(parsed[0], parsed[1], schemas)
            assert score(ex, ex.answer)[0]
        msgs = ex.messages()
        assert msgs[-1]["role"] in ("user", "tool")
        assert sum(m["role"] == "user" for m in msgs) <= 2  # one previous exchange at most
    assert {"book", "slot_fill", "availability", "book_result", "cancel", "follow:price",
            "follow:hours_day", "follow:clarify"} <= kinds
    assert not gen.is_well_formed("We take walk, fillings we can, but booking ahead")
    assert not gen.is_well_formed('<tool_call>\n{"name": "book_appointment", "arguments": '
                                  '{"service": "haircut"}}\n</tool_call>')


def test_slot_filling_questions_restate_what_is_known(gen):
    d = gen.dialogues
    assert d.ask({}) == "Sure, what would you like to come in for?"
    assert d.ask({"service": "cleanings"}) == \
        "Sure, what day would you like to come in for a cleaning?"
    assert d.ask({"service": "fillings", "day": "friday"}) == \
        "What time on Friday would you like to come in for a filling?"
    assert d.ask({"service": "crowns", "day": "thursday", "time": "14:00"}) == \
        "And what name should I put a crown on Thursday at 2 pm under?"
    assert "closed on Sundays" in d.ask({"service": "crowns", "day": "sunday"})
    assert d.book_result_reply({"service": "cleanings", "day": "friday", "time": "10:00"},
                               {"booked": True}) == \
        "You're booked for a cleaning on Friday at 10 am."
    assert "11:30 am or 2 pm" in d.book_result_reply(
        {"service": "cleanings", "day": "friday", "time": "10:00"},
        {"booked": False, "alternatives": ["11:30", "14:00"]})


def test_heldout_dialogue_phrasings_and_names_are_disjoint_from_training(gen):
    assert not set(FIRST) & set(FIRST_HELD) and not set(LAST) & set(LAST_HELD)
    for table in (BOOK_VERBS, ANSWER_NAME):
        assert not set(table["train"]) & set(table["heldout"])
    rng = random.Random(5)
    train_users = {normalize(m["content"]) for _ in range(3000)
                   for m in gen.dialogues.sample(rng, "train").messages if m["role"] == "user"}
    held = gen.dialogue_eval_set(n=120)
    assert any(ex.call for ex in held)
    names = " ".join(json.dumps(ex.call) for ex in held if ex.call)
    assert not any(f'"{n} ' in names or f'"{n}"' in names for n in FIRST)
    assert sum(normalize(ex.question) in train_users for ex in held) < len(held) * 0.2


def test_callers_say_times_in_many_ways():
    rng = random.Random(0)
    said = {say_time("14:30", rng) for _ in range(200)}
    assert {"2:30", "half past two", "two thirty"} <= said
    assert "noon" in {say_time("12:00", rng) for _ in range(200)}


def test_chat_template_renders_the_previous_exchange_and_tool_roles(tmp_path):
    train_tokenizer([" hello", "Hi there."] * 20, tmp_path, vocab_size=320)
    tok = ChatTokenizer.from_dir(tmp_path)
    messages = [
        {"role": "system", "content": "You are a pirate."},
        {"role": "user", "content": "Old question"}, {"role": "assistant", "content": "Old."},
        {"role": "user", "content": "How much is a Crown?"},
        {"role": "assistant", "content": "A crown is 900 dollars."},
        {"role": "user", "content": "  Book it FRIDAY at 10, Ann Lee "},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c", "type": "function",
            "function": {"name": "book_appointment", "arguments": json.dumps(
                {"service": "crowns", "day": "friday", "time": "10:00", "name": "ann lee"})}}]},
        {"role": "tool", "content": '{"booked": true}'}]
    prompt = tok.render(messages)
    assert prompt == (
        "<|user|> how much is a crown?<|end|><|assistant|>A crown is 900 dollars.<|end|>"
        "<|user|> book it friday at 10, ann lee<|end|><|assistant|><tool_call>\n"
        '{"name": "book_appointment", "arguments": {"service": "crowns", "day": "friday", '
        '"time": "10:00", "name": "ann lee"}}\n</tool_call><|end|>'
        '<|tool|> {"booked": true}<|end|><|assistant|>')
    assert "pirate" not in prompt and "old question" not in prompt
    assert tok.render([{"role": "user", "content": "Hi"}]) == "<|user|> hi<|end|><|assistant|>"
    ids = tok.encode('<tool_call>\n{"name": "cancel_appointment", "arguments": {"name": "x", '
                     '"day": "monday"}}\n</tool_call>')
    assert ids[0] == tok.token_id("<tool_call>") and ids[-1] == tok.token_id("</tool_call>")
    assert all(tok.token_id(t) is not None for t in TOOL_TOKENS)
    assert tok.dropped(messages) == {"system": 1, "history": 2}
    assert tok.dropped(messages[3:]) == {}
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())["receptionist"]
    assert cfg == {"history_exchanges": 1, "system_prompt": "ignored",
                   "tools": "built in: agent/tool_schemas.py"}


def test_business_name_flows_into_email_website_and_answers():
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    doc["business"]["name"] = "Smith & Sons Dental"
    facts = parse_facts(doc)
    assert facts.email == "hello at smith and sons dental dot com"
    assert facts.website == "smith and sons dental dot com"
    assert "smith and sons dental dot com" in facts.booking_answer
    assert [s.minutes for s in facts.services][:3] == [45, 60, 90]
    doc["booking"]["answer"] = "Call {nmae}."
    with pytest.raises(ValueError, match="booking.answer: unknown placeholder"):
        parse_facts(doc)
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    del doc["services"][5]["minutes"]  # crowns: "2 visits" is not a duration in minutes
    assert parse_facts(doc).services[5].minutes == 60
    doc["services"][5]["minutes"] = 0
    with pytest.raises(ValueError, match="services\\[5\\].minutes must be"):
        parse_facts(doc)


def test_independent_set_is_big_varied_and_never_in_training(gen):
    items = load_independent()
    assert len(items) >= 120
    questions = {normalize(i["q"]) for i in items}
    for failing in ("whats your address", "do you take apple pay", "i think i cracked my tooth",
                    "what kind of work do you do", "i'd like to book a cleaning",
                    "my mom uses a wheelchair can she get in", "whats your email address"):
        assert normalize(failing) in questions
    assert sum(bool(i.get("history")) for i in items) >= 15
    assert sum("call" in i for i in items) >= 5
    examples = independent_examples(gen)
    assert all(ex.answer for ex in examples)
    assert training_overlap(gen, n=4000) == set()


def test_every_recogniser_heard_the_same_spoken_questions(gen):
    """The spoken independent set: each recogniser's rows cover the same (question, voice)
    pairs, so their accuracies compare (whisper-base rows come from the extra, appended by
    `asr_augment independent --append --asr whisper-base`), for the espeak voices and for the
    natural Kokoro voices alike."""
    from diffvoice.agent.train.asr_augment import RECOGNISERS, Recognisers
    from diffvoice.agent.train.independent import spoken_examples

    for tts in ("espeak", "kokoro"):  # kokoro: the natural voices' rows
        pairs = {asr: {ex.template.rsplit(":", 1)[0]
                       for ex in spoken_examples(gen, asr=asr, tts=tts)} for asr in RECOGNISERS}
        assert pairs["whisper-tiny.en"] and all(p == pairs["whisper-tiny.en"]
                                                for p in pairs.values() if p), \
            (tts, {k: len(v) for k, v in pairs.items()})
    espeak_voices = {ex.template.split(":")[2] for ex in spoken_examples(gen)}
    kokoro_voices = {ex.template.split(":")[2] for ex in spoken_examples(gen, tts="kokoro")}
    assert espeak_voices and kokoro_voices and not espeak_voices & kokoro_voices
    with pytest.raises(ValueError, match="unknown recogniser"):
        Recognisers(("whisper-large",))


def test_agreement_of_a_careful_retry():
    assert agrees("A crown is 900 dolla dollars.", "A crown is 900 dollars.")
    assert agrees("You're booked for a filling on Thursday at 102..",
                  "You're booked for a filling on Thursday at 10 pm.")
    assert not agrees("We're across the in we the public library, next to the green pharmacy.",
                      "I can book you in right now, or you can book online at bluebird dental "
                      "dot com.")
    assert not agrees("", "A crown is 900 dollars.") and not agrees("A crown", "")
    assert agrees("a b c d", "a b x y", min_ratio=0.5) and not agrees("a b c d", "a x y z")


def test_careful_params_decode_one_token_per_pass(tmp_path):
    """Engine.careful_params: "fast" low_confidence with a pass per slot of the block; on a
    random-weight block-causal model a 16-token answer takes 16 committing passes (at least),
    twice as many as the default 4 passes per 8-token block."""
    make_random_checkpoint(tmp_path, family="sdar")
    engine = Engine.from_pretrained(tmp_path, EngineConfig(max_running=1))
    params = SamplingParams(max_new_tokens=16, ignore_eos=True, steps_per_block=2)

    async def passes(p):
        deltas = [d async for d in engine.generate([{"role": "user", "content": "hi"}], p)]
        return deltas[-1].passes, deltas[-1].completion_tokens

    try:
        careful = engine.careful_params(params)
        block = engine.loaded.config.block_size
        assert (careful.policy, careful.decoding, careful.steps_per_block) == \
            ("low_confidence", "fast", block)
        assert careful.max_new_tokens == 16 and careful.ignore_eos
        fast_passes, n = asyncio.run(passes(params))
        careful_passes, n2 = asyncio.run(passes(careful))
    finally:
        engine.close()
    assert n == n2 == 16
    assert careful_passes >= 16 > fast_passes, (careful_passes, fast_passes)


def test_engine_reports_first_block_confidence(tmp_path):
    make_random_checkpoint(tmp_path, family="sdar")
    engine = Engine.from_pretrained(tmp_path, EngineConfig(max_running=2))

    async def run():
        deltas = [d async for d in engine.generate([{"role": "user", "content": "hello"}],
                                                   SamplingParams(max_new_tokens=16,
                                                                  ignore_eos=True))]
        return deltas

    try:
        deltas = asyncio.run(run())
    finally:
        engine.close()
    confs = [d.first_block_confidence for d in deltas if d.first_block_confidence is not None]
    assert confs and all(0.0 < c <= 1.0 for c in confs)
    assert len(set(confs)) == 1  # fixed once the first block is done


def test_evaluation_voices_never_spoke_training_data():
    """The spoken independent set is heard in voices training never heard: the espeak and
    Kokoro evaluation voices are absent from the training ASR cache, whose rows use only the
    declared training voices, and the cached evaluation rows only the evaluation voices."""
    from diffvoice.agent.train.asr_augment import (
        EVAL_KOKORO_VOICES,
        EVAL_VOICES,
        INDEPENDENT_CACHE,
        TRAIN_CACHE,
        TRAIN_KOKORO_VOICES,
        TRAIN_VOICES,
        load_cache,
    )

    eval_espeak = {v for v, _, _ in EVAL_VOICES}
    eval_kokoro = {v for v, _ in EVAL_KOKORO_VOICES}
    train_voices = {v for v, _, _ in TRAIN_VOICES} | {v for v, _ in TRAIN_KOKORO_VOICES}
    assert not (eval_espeak | eval_kokoro) & train_voices
    train_rows = load_cache(TRAIN_CACHE)
    assert train_rows and {r["voice"] for r in train_rows} <= train_voices
    for r in load_cache(INDEPENDENT_CACHE):
        declared = eval_kokoro if r.get("tts") == "kokoro" else eval_espeak
        assert r["voice"] in declared, r
