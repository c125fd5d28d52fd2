"""Slots narrowed by the conversation (engine/constrained/context.py): spoken times, mentioned
values, names copied from the caller's words; the receptionist's product schemas; and, through a
random-weight engine, calls whose narrowed values always come from the conversation."""

from __future__ import annotations

import asyncio
import json

import pytest

from diffvoice.engine.constrained.context import (
    ALIASES_KEY,
    FUNCTION_WORDS,
    KEY,
    aliased,
    contextualize,
    mentioned,
    spans,
    times_mentioned,
)


@pytest.mark.parametrize("text, want", [
    ("ten thirty works", {"10:30", "22:30"}),
    ("at 9am", {"09:00"}),
    ("would one pm wednesday work", {"13:00"}),
    ("8 30 for friday", {"08:30", "20:30"}),
    ("noon please", {"12:00"}),
    ("10 a.m.", {"10:00"}),
    ("I need a cleaning on Friday. 10 AM.", {"10:00"}),
    ("at 3 in the afternoon", {"15:00"}),
    ("2:30 p.m. works for me", {"14:30"}),
    ('{"available": ["14:00"]}', {"14:00"}),
    ("call 555 0142", set()),
    # times written without the colon (Whisper: "at 1030"): after a time word or before am/pm
    ("could i come in wednesday at 1030", {"10:30", "22:30"}),
    ("930 am works", {"09:30"}),
    ("at 1130pm", {"23:30"}),
    ("room 1030 please", set()),
    ("at 2024", set()),
    ("i have 1030 dollars", set()),
    ("what are your hours", set()),
])
def test_times_mentioned(text, want):
    assert times_mentioned(text) == want


def test_spans_and_name_spans():
    msgs = [{"role": "user", "content": "book a cleaning for friday"},
            {"role": "assistant", "content": "And what name should I put it under?"},
            {"role": "user", "content": "That would be Ivy Hayes."}]
    every = spans(msgs)
    assert every[0] == "That" and "Ivy Hayes" in every and "ivy hayes" in every
    assert "book a cleaning" in every and "should" not in every  # user words only
    from diffvoice.engine.constrained.context import FUNCTION_WORDS

    named = spans(msgs, skip=FUNCTION_WORDS | {"cleaning"})
    assert named == ["Ivy Hayes", "ivy hayes"]
    assert spans(msgs, max_chars=4) == [s for s in every if len(s) <= 4]


def _tool(props):
    return [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": props, "required": list(props)}}}]


def test_contextualize_narrows_only_what_opted_in():
    day = {"type": "string", "enum": ["monday", "friday", "saturday"], KEY: "mentioned"}
    time = {"type": ["string", "null"], "enum": ["09:00", "10:00", "14:00", None],
            KEY: "mentioned"}
    name = {"type": "string", "maxLength": 40, KEY: "name_span"}
    plain = {"type": "string", "enum": ["a", "b"]}
    tools = _tool({"day": day, "time": time, "name": name, "plain": plain})
    before = json.dumps(tools)
    msgs = [{"role": "user", "content": "can i come in on friday at 10"},
            {"role": "assistant", "content": "Sorry, Saturday at 9 am is taken."},
            {"role": "user", "content": "my name is sam jones"}]
    out = contextualize(tools, msgs)[0]["function"]["parameters"]["properties"]
    assert json.dumps(tools) == before  # the input is left intact
    assert out["day"]["enum"] == ["friday"]  # the caller's word beats the model's own restatement
    assert out["time"]["enum"] == ["10:00", None]
    assert out["name"]["enum"] == ["sam jones"] and KEY not in out["name"]
    assert out["plain"] == plain
    # nothing mentioned: a tool that requires the value waits (the model asks for it) ...
    assert contextualize(tools, [{"role": "user", "content": "hello"}]) == []
    # ... and when a call is required anyway: the full enum, never an empty one
    none = contextualize(tools, [{"role": "user", "content": "hello"}], must_call=True)[0]
    props = none["function"]["parameters"]["properties"]
    assert props["day"]["enum"] == day["enum"]
    assert props["time"]["enum"] == [None]  # an optional value nobody gave: null, not a guess
    assert "enum" not in props["name"] and props["name"]["maxLength"] == 40  # free text stays
    with pytest.raises(ValueError, match="x-diffvoice-context"):
        contextualize(_tool({"x": {"type": "string", KEY: "guess"}}), msgs)


def test_receptionist_decoding_schemas():
    from diffvoice.agent.booking_schemas import decoding_schemas
    from diffvoice.agent.facts import load_facts
    from diffvoice.agent.tool_schemas import tool_schemas
    from diffvoice.engine import DEFAULT_MODEL_DIR

    facts = load_facts(DEFAULT_MODEL_DIR / "facts.yaml")
    trained, served = tool_schemas(facts), decoding_schemas(facts)
    for t, s in zip(trained, served, strict=True):  # same names and wire order
        assert t["function"]["name"] == s["function"]["name"]
        assert list(t["function"]["parameters"]["properties"]) == \
            list(s["function"]["parameters"]["properties"])
    book = served[1]["function"]["parameters"]["properties"]
    hours = dict(facts.hours)
    assert book["day"]["enum"] == [d for d in hours if hours[d] != "closed"]
    assert "08:00" in book["time"]["enum"] and "07:30" not in book["time"]["enum"]
    assert served[0]["function"]["parameters"]["properties"]["time"]["enum"][-1] is None
    assert book["name"][KEY] == "name_span" and book["day"][KEY] == "mentioned"
    schema_only = decoding_schemas(facts, context=False)
    assert not any(KEY in p for t in schema_only
                   for p in t["function"]["parameters"]["properties"].values())


def test_random_model_calls_take_narrowed_values_from_the_conversation(tmp_path):
    from diffvoice.engine import Engine, EngineConfig, SamplingParams
    from diffvoice.engine.testing import make_random_checkpoint

    ckpt = make_random_checkpoint(tmp_path / "random-sdar", family="sdar")
    engine = Engine.from_pretrained(ckpt, EngineConfig(device="cpu", max_running=4))
    tools = _tool({
        "day": {"type": "string", "enum": ["monday", "tuesday", "friday"], KEY: "mentioned"},
        "time": {"type": "string", "pattern": r"^([01]\d|2[0-3]):([0-5]\d)$", KEY: "mentioned"},
        "name": {"type": "string", "maxLength": 40, KEY: "name_span"}})
    convs = [("book me in on friday at half past 10", "put it under rosa ortiz"),
             ("tuesday at 2 pm please", "the name is hugo")]

    async def run():
        out = []
        for first, second in convs:
            msgs = [{"role": "user", "content": first}, {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": second}]
            params = SamplingParams(max_new_tokens=48, tools=tuple(tools), tool_choice="required",
                                    temperature=0.0)
            async for d in engine.generate(msgs, params):
                if d.tool_call:
                    out.append(json.loads(d.tool_call["arguments"]))
        return out

    try:
        got = asyncio.run(run())
    finally:
        engine.close()
    # whatever the weights: only what was said ("half past 10" is not also a bare 10)
    assert got[0]["day"] == "friday" and got[0]["time"] in ("10:30", "22:30")
    assert got[0]["name"] == "rosa ortiz"  # the only name-like run of the caller's words
    assert got[1] == {"day": "tuesday", "time": "14:00", "name": "hugo"}


def test_mentioned_prefers_the_callers_choice_among_a_tool_results_values():
    """The caller asked for half past two; the result lists it among other free times; the
    assistant confirmed; the caller gives a name: the booking's time is the caller's choice,
    not any free time of the result (a tiny model picked 12:00 here)."""
    time = {"type": "string", "enum": ["08:00", "12:00", "14:30", "16:00"], KEY: "mentioned"}
    nullable = {"type": ["string", "null"], "enum": ["08:00", "12:00", "14:30", "16:00", None],
                KEY: "mentioned"}
    name = {"type": "string", "maxLength": 40, KEY: "name_span"}
    tools = _tool({"time": time, "maybe": nullable, "name": name})
    tools[0]["function"]["parameters"]["required"] = []  # nothing waits: the narrowing alone
    msgs = [{"role": "user", "content": "would half past two on monday work"},
            {"role": "assistant", "content": None, "tool_calls": []},
            {"role": "tool", "content": '{"available": ["14:30", "08:00", "12:00"]}'},
            {"role": "assistant", "content": "Yes, Monday at 2:30 pm is free. What name?"},
            {"role": "user", "content": "you can put hugo hayes"}]
    out = contextualize(tools, msgs)[0]["function"]["parameters"]["properties"]
    assert out["time"]["enum"] == ["14:30"] and out["maybe"]["enum"] == ["14:30", None]
    # the result does not list what the caller asked for: every time it offers
    msgs[2] = {"role": "tool", "content": '{"available": ["08:00", "12:00"]}'}
    out = contextualize(tools, msgs)[0]["function"]["parameters"]["properties"]
    assert out["time"]["enum"] == ["08:00", "12:00"]
    # a time that is none of the values: nothing narrowed, and an optional time is null (ask
    # for any free time rather than guess one)
    said = [{"role": "user", "content": "would 8 30 on friday work for a cleaning"}]
    out = contextualize(tools, said)[0]["function"]["parameters"]["properties"]
    assert out["time"]["enum"] == time["enum"] and out["maybe"]["enum"] == [None]
    # a time in the caller's latest message: that time, and checking "any time" is not offered
    said = [{"role": "user", "content": "would 4 pm on friday work for a cleaning"}]
    out = contextualize(tools, said)[0]["function"]["parameters"]["properties"]
    assert out["maybe"]["enum"] == ["16:00"]
    # an earlier caller message that mentions a time keeps the null candidate
    later = said + [{"role": "assistant", "content": "Which service?"},
                    {"role": "user", "content": "a cleaning please"}]
    out = contextualize(tools, later)[0]["function"]["parameters"]["properties"]
    assert out["maybe"]["enum"] == ["16:00", None]


def test_name_spans_skip_contractions():
    msgs = [{"role": "user", "content": "i won't make it so cancel it"},
            {"role": "assistant", "content": "Which day?"},
            {"role": "user", "content": "tuesday, it's under O'Brien"}]
    from diffvoice.engine.constrained.context import FUNCTION_WORDS

    named = spans(msgs, skip=FUNCTION_WORDS)
    assert "O'Brien" in named and not any("won't" in s for s in named)


def test_a_name_is_copied_only_where_one_was_given():
    from diffvoice.engine.constrained.context import FUNCTION_WORDS

    def named(*texts):
        msgs = [{"role": "assistant" if i % 2 else "user", "content": t}
                for i, t in enumerate(texts)]
        return spans(msgs, skip=FUNCTION_WORDS | {"cleaning"}, cued=True)

    assert named("i'd love to book a cleaning on friday") == []
    assert named("sign me up for a cleaning") == []
    assert named("put it under ivy hayes") == ["ivy hayes"]
    assert named("a cleaning friday, and i'm Rosa") == ["Rosa", "rosa"]
    assert named("my name's hugo ortiz, a cleaning please") == ["hugo ortiz"]
    assert named("book a cleaning", "And what name should I put it under?", "felix quinn thanks") \
        == ["felix quinn"]
    # an answer to some other question is no name
    assert named("book a cleaning", "What day would you like?", "whenever suits") == []


def test_a_tool_that_needs_a_name_waits_for_one():
    book = {"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "required": ["day", "name"], "properties": {
            "day": {"type": "string", "enum": ["friday"], KEY: "mentioned"},
            "name": {"type": "string", "maxLength": 40, KEY: "name_span"}}}}}
    check = {"type": "function", "function": {"name": "check", "parameters": {
        "type": "object", "required": ["day"], "properties": {
            "day": {"type": "string", "enum": ["friday"], KEY: "mentioned"}}}}}
    no_name = [{"role": "user", "content": "i'd love to book friday"}]
    assert [t["function"]["name"] for t in contextualize([check, book], no_name)] == ["check"]
    # forced, or the only tool when a call is required: kept, its name slot free text as the
    # schema says; the only tool under "auto": left out (the model asks for the name)
    assert contextualize([book], no_name) == []
    for out in (contextualize([check, book], no_name, keep="book")[1],
                contextualize([book], no_name, must_call=True)[0]):
        name = out["function"]["parameters"]["properties"]["name"]
        assert out["function"]["name"] == "book" and name == {"type": "string", "maxLength": 40}
    named = contextualize([check, book], no_name + [
        {"role": "assistant", "content": "And what name should I put it under?"},
        {"role": "user", "content": "that would be sam jones"}])
    assert [t["function"]["name"] for t in named] == ["check", "book"]
    assert named[1]["function"]["parameters"]["properties"]["name"]["enum"] == [
        "sam jones"]


def test_a_value_the_caller_just_said_is_not_offered_as_null():
    """A nullable time: the caller said "8 30", so null is no candidate — the type loses "null"
    too, or the layout would offer null again (it adds null to a nullable type's enum; a tiny
    model chose `"time": null` for "would 8 30 for friday work")."""
    from diffvoice.engine.constrained.layout import compile_value
    from diffvoice.engine.constrained.slots import Vocab
    from diffvoice.engine.testing import make_tokenizer
    from diffvoice.engine.tokenizer import ChatTokenizer

    time = {"type": ["string", "null"], "enum": ["08:00", "08:30", None], KEY: "mentioned"}
    pattern = {"type": ["string", "null"], "pattern": r"^([01]\d|2[0-3]):([0-5]\d)$",
               KEY: "mentioned"}
    tools = _tool({"time": time, "at": pattern})
    tools[0]["function"]["parameters"]["required"] = []
    said = [{"role": "user", "content": "would 8 30 for friday work"}]
    out = contextualize(tools, said)[0]["function"]["parameters"]["properties"]
    assert out["time"] == {"type": "string", "enum": ["08:30"]}
    assert out["at"] == {"type": "string", "enum": ["08:30", "20:30"]}
    earlier = said + [{"role": "assistant", "content": "Which service?"},
                      {"role": "user", "content": "a cleaning"}]
    out = contextualize(tools, earlier)[0]["function"]["parameters"]["properties"]
    assert out["time"]["enum"] == ["08:30", None] and out["time"]["type"] == ["string", "null"]
    assert out["at"]["enum"] == ["08:30", "20:30", None]
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        make_tokenizer(Path(d))
        vocab = Vocab(ChatTokenizer.from_dir(Path(d)))
        strict = contextualize(tools, said)[0]["function"]["parameters"]["properties"]["time"]
        layout = compile_value({"type": "object", "properties": {"t": strict}}, vocab, 0)
        (_, slot), = [s for s in layout.slots if s[1].kind == "choice"]
        assert len(slot.seqs) == 1  # "08:30" only: null is not laid as a candidate


def test_an_enum_value_is_mentioned_by_its_aliases_longest_first():
    aliases = {"cleanings": ["cleaning", "checkup", "teeth cleaning"],
               "kids checkups": ["kids checkup", "child checkup"], "crowns": ["crown"]}
    values = list(aliases)
    said = lambda text: mentioned(values, [{"role": "user", "content": text}], aliases)  # noqa
    assert said("got any time friday for teeth cleaning") == ["cleanings"]
    assert said("a kids checkup please") == ["kids checkups"]  # not also "checkup"
    assert said("a checkup and a crown") == ["cleanings", "crowns"]
    assert said("anything on friday") == values  # nothing said: every value
    assert said("two crowns") == ["crowns"]


@pytest.mark.parametrize("text, want", [
    # possessives, hyphens and spacing as recognisers write them (Whisper: "kids' checkups")
    ("do you have room saturday for a kids' checkup", {"kids checkups"}),
    ("how much is a kid's checkup?", {"kids checkups"}),
    ("a kids check-up.", {"kids checkups"}),
    ("how long are kids check ups", {"kids checkups"}),
    ("a children\u2019s checkup", {"kids checkups"}),
    ("a check-up, please", {"cleanings"}),
    ("two check ups", {"cleanings"}),
    ("a teeth-cleaning and a crown", {"cleanings", "crowns"}),
    ("my kids need checkups", {"cleanings"}),  # "kids" is not next to the checkup
    ("a back up plan", set()),
])
def test_aliases_are_read_as_recognisers_write_them(text, want):
    aliases = {"cleanings": ["cleaning", "checkup", "check up", "teeth cleaning"],
               "kids checkups": ["kids checkup", "children's checkup"], "crowns": ["crown"]}
    assert aliased(list(aliases), text, aliases) == want


def test_random_text_is_read_alike_with_and_without_punctuation():
    # the reader ignores punctuation: on random word salads of alias words and fillers, the
    # values found are the same with commas, full stops and question marks sprinkled in
    import random

    aliases = {"cleanings": ["cleaning", "checkup", "check up", "teeth cleaning"],
               "kids checkups": ["kids checkup", "children's checkup"], "crowns": ["crown"],
               "fillings": ["filling", "cavity filling"]}
    words = "a the kids kid's check up checkup cleaning teeth crown crowns cavity filling " \
            "children's for my and please".split()
    rng = random.Random(0)
    for _ in range(300):
        ws = [rng.choice(words) for _ in range(rng.randint(1, 8))]
        plain = " ".join(ws)
        marked = " ".join(w + rng.choice(["", "", ",", ".", "?"]) for w in ws)
        assert aliased(list(aliases), plain, aliases) == aliased(list(aliases), marked, aliases)


def test_a_tool_waits_for_a_required_value_nobody_said():
    """The caller is cancelling: no service was ever said, so booking waits and cancelling is
    the only call left; with nothing to call at all the model answers."""
    service = {"type": "string", "enum": ["cleanings", "crowns"], KEY: "mentioned",
               ALIASES_KEY: {"cleanings": ["cleaning", "dental cleaning"],
                             "crowns": ["crown", "dental crown"]}}
    day = {"type": "string", "enum": ["wednesday", "friday"], KEY: "mentioned"}
    name = {"type": "string", "maxLength": 40, KEY: "name_span"}

    def tool(n, props):
        return {"type": "function", "function": {"name": n, "parameters": {
            "type": "object", "required": list(props), "properties": props}}}

    book = tool("book", {"service": service, "day": day, "name": name})
    cancel = tool("cancel", {"name": name, "day": day})
    msgs = [{"role": "user", "content": "scrap my appointment on wednesday"},
            {"role": "assistant", "content": "And what name is the Wednesday appointment under?"},
            {"role": "user", "content": "you can put felix fischer"}]
    assert [t["function"]["name"] for t in contextualize([book, cancel], msgs)] == ["cancel"]
    assert contextualize([book, cancel], msgs[:1]) == []  # no name, no service: ask
    assert [t["function"]["name"] for t in contextualize([book, cancel], msgs[:1],
                                                         keep="book")] == ["book"]
    # a name is no word of any tool's values or aliases ("for dental crown" names no one), and
    # "i'm hoping to book" gives no name "hoping"
    crown = [{"role": "user", "content": "i'm hoping to book for dental crown on friday"}]
    assert [t["function"]["name"] for t in contextualize([book, cancel], crown)] == []
    named = crown + [{"role": "assistant", "content": "And what name should I put it under?"},
                     {"role": "user", "content": "hugo"}]
    out = {t["function"]["name"]: t for t in contextualize([book, cancel], named)}
    props = out["book"]["function"]["parameters"]["properties"]
    assert props["name"]["enum"] == ["hugo"] and props["service"]["enum"] == ["crowns"]
    assert ALIASES_KEY not in props["service"]
    assert spans([{"role": "user", "content": "hi i'm ming"}], skip=FUNCTION_WORDS,
                 cued=True) == ["ming"]
    # a request's verb after the name is no part of it (recognisers drop the comma)
    for said in ("sometime saturday and i'm rosa sign me up please",
                 "i'm rosa squeeze me in friday", "it's for rosa pencil me in",
                 "under rosa reschedule it to friday"):
        assert spans([{"role": "user", "content": said}], skip=FUNCTION_WORDS,
                     cued=True) == ["rosa"], said
    # the assistant's own words give no value: an hours answer is no booking day
    hours = [{"role": "user", "content": "when are you open"},
             {"role": "assistant", "content": "On Fridays we're open from 8 am to 3 pm."},
             {"role": "user", "content": "ok a crown then, i'm hugo"}]
    assert [t["function"]["name"] for t in contextualize([book, cancel], hours)] == []


def test_narrowing_names_no_word_of_another_propertys_values_and_counts_its_checks():
    """The words of the other properties' values stay out of a name (as before the lazy set),
    and the checks are counted before any is made (issue 54 N1)."""
    from diffvoice.engine.constrained.context import (
        MAX_CONTEXT_CHECKS,
        context_checks,
        contextualize,
    )

    tools = [{"type": "function", "function": {"name": "book", "parameters": {
        "type": "object", "required": ["name", "service"], "properties": {
            "name": {"type": "string", "x-diffvoice-context": "name_span"},
            "service": {"type": "string", "enum": ["dental crown", "cleaning"],
                        "x-diffvoice-context": "mentioned"}}}}}]
    messages = [{"role": "user", "content": "my name is Pat, a dental crown please"}]
    out = contextualize(tools, messages)
    names = out[0]["function"]["parameters"]["properties"]["name"]["enum"]
    assert any("pat" in n.lower() for n in names)
    assert not any("dental" in n.lower() or "crown" in n.lower() for n in names), names
    assert out[0]["function"]["parameters"]["properties"]["service"]["enum"] == ["dental crown"]
    # (values + 1) x (messages + 1): name_span has no values; service's two-word one counts 10
    assert context_checks(tools, messages) == 1 * 2 + 12 * 2
    assert context_checks(tools, messages * 40_000) > MAX_CONTEXT_CHECKS
    with pytest.raises(ValueError, match="value-by-message checks"):
        contextualize(tools, messages * 40_000)


def _defs_tool(n_defs: int, per_def: int) -> list[dict]:
    defs = {f"d{i}": {"type": "object", "properties": {
        f"p{j}": {"type": "string", "minLength": 1} for j in range(per_def)}}
        for i in range(n_defs)}
    return [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string"}}, "$defs": defs}}}]


def test_schema_objects_are_counted_before_the_meta_check():
    """Issue 54 N1: 57 KB of $defs took 0.5 s (a nested anyOf variant 1 s) in the meta-schema
    check, before any bound saw them; now every JSON object in the schemas counts."""
    from diffvoice.engine.constrained.limits import MAX_SCHEMA_OBJECTS, check_request

    with pytest.raises(ValueError, match=f"at most {MAX_SCHEMA_OBJECTS}"):
        check_request(_defs_tool(150, 8), None, None)
    check_request(_defs_tool(20, 8), None, None)  # 200 objects: checked, fine


def test_the_meta_check_of_defs_stops_at_the_budget():
    from diffvoice.engine.constrained.limits import Budget, PreparationAborted, check_request

    budget = Budget(1e-9)  # spent before the first $defs entry is checked
    with pytest.raises(PreparationAborted, match="budget"):
        check_request(_defs_tool(60, 4), None, None, budget)


def test_a_bad_pattern_is_refused_without_a_log_line(capfd):
    """RE2 wrote each pattern it could not parse to stderr: one server log line per hostile
    request (issue 54 N10's class)."""
    from diffvoice.engine.constrained.layout import _pattern_times

    with pytest.raises(ValueError, match="lookaround"):
        _pattern_times(r"^(?=00:0[0-4])(?:\d?:?){50}y", "x")
    assert capfd.readouterr().err == ""
