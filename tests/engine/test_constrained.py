"""Schema-constrained decoding (engine/constrained/) with random-weight models: every call parses
and validates, whatever the weights; the canvas is the wire text plus JSON whitespace; ordinary
requests batched beside constrained ones decode exactly as alone; tool_choice modes."""

from __future__ import annotations

import asyncio
import json

import jsonschema
import pytest
import torch

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.constrained import TOOL_CALL_CLOSE, TOOL_CALL_OPEN
from diffvoice.engine.testing import make_random_checkpoint

TIME = r"^([01]\d|2[0-3]):([0-5]\d)$"


def fn(name, props, required=None):
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": props,
        "required": list(props) if required is None else required}}}


TOOLS = [
    fn("book_appointment", {
        "service": {"type": "string", "enum": ["cleanings", "fillings", "teeth whitening",
                                               "emergency visits"]},
        "day": {"type": "string", "enum": ["monday", "tuesday", "wednesday", "thursday",
                                           "friday", "saturday", "sunday"]},
        "time": {"type": "string", "pattern": TIME},
        "name": {"type": "string", "maxLength": 12}}),
    fn("check_availability", {
        "service": {"type": "string", "enum": ["cleanings", "crowns"]},
        "day": {"type": "string", "enum": ["monday", "friday"]},
        "time": {"type": ["string", "null"], "pattern": TIME}}, ["service", "day"]),
    fn("set_volume", {
        "level": {"type": "integer", "minimum": 0, "maximum": 100},
        "delta": {"type": "integer"},
        "mute": {"type": "boolean"},
        "room": {"type": "object", "properties": {
            "floor": {"type": "integer", "minimum": -2, "maximum": 9},
            "label": {"type": "string", "minLength": 2, "maxLength": 6}}}}),
    fn("noop", {}),
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("m"), family="sdar", seed=5,
                                  init_std=0.5)
    eng = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                    max_running=100, max_queued=0))
    yield eng
    eng.close()


async def run(engine, messages, params):
    return [d async for d in engine.generate(messages, params)]


def check_call(engine, deltas, expect_name=None):
    """The call parses, validates, and the canvas is exactly its wire text."""
    last = deltas[-1]
    assert last.finished and last.finish_reason == "tool_calls", last.finish_reason
    call = last.tool_call
    assert call is not None and (expect_name is None or call["name"] == expect_name)
    args = json.loads(call["arguments"])
    jsonschema.validate(args, SCHEMAS[call["name"]])
    assert list(args) == list(SCHEMAS[call["name"]]["properties"])  # every key, in order
    ids = [t for d in deltas for t in d.token_ids]
    while ids and ids[-1] in engine.model_config.eos_token_ids:  # ignore_eos keeps the EOS
        ids.pop()
    canvas = engine.tokenizer.tokenizer.decode(ids, skip_special_tokens=False)
    assert canvas.startswith(TOOL_CALL_OPEN + "\n") and canvas.endswith("\n" + TOOL_CALL_CLOSE)
    body = json.loads(canvas[len(TOOL_CALL_OPEN) + 1: -len(TOOL_CALL_CLOSE) - 1])
    assert body == {"name": call["name"], "arguments": args}
    assert canvas == (f"{TOOL_CALL_OPEN}\n" + json.dumps(body, ensure_ascii=False)
                      + f"\n{TOOL_CALL_CLOSE}")  # no padding: the exact wire text
    assert "".join(d.text for d in deltas) == ""  # a call is not spoken text
    return call["name"], args


@pytest.mark.slow
async def test_1000_forced_calls_always_parse_and_validate(engine):
    """Greedy and sampled, every tool_choice that forces a call, four schemas, batches of 100."""
    choices = [{"type": "function", "function": {"name": n}} for n in SCHEMAS] + ["required"]
    seen = {n: set() for n in SCHEMAS}
    for round_ in range(10):
        batch = []
        for i in range(100):
            k = round_ * 100 + i
            choice = choices[k % len(choices)]
            params = SamplingParams(
                max_new_tokens=8, tools=TOOLS, tool_choice=choice, policy="threshold",
                threshold=0.9 if k % 3 else 0.5, temperature=0.0 if k % 2 else 1.5, seed=k)
            batch.append(run(engine, [{"role": "user", "content": f"call {k} please"}], params))
        results = await asyncio.gather(*batch)
        for k, deltas in enumerate(results, start=round_ * 100):
            choice = choices[k % len(choices)]
            want = choice["function"]["name"] if isinstance(choice, dict) else None
            name, args = check_call(engine, deltas, want)
            seen[name].add(json.dumps(args, sort_keys=True))
    # sampling explores: not one fixed answer per schema
    assert all(len(v) > 1 for n, v in seen.items() if n != "noop"), {
        n: len(v) for n, v in seen.items()}


async def test_plain_requests_beside_constrained_ones_decode_as_alone(engine):
    plain = SamplingParams(max_new_tokens=12, ignore_eos=True)
    msgs = [{"role": "user", "content": "Hello there"}]
    alone = await run(engine, msgs, plain)
    forced = SamplingParams(max_new_tokens=8, tools=TOOLS, tool_choice="required")
    mixed = await asyncio.gather(run(engine, msgs, plain),
                                 *[run(engine, [{"role": "user", "content": f"x{i}"}], forced)
                                   for i in range(5)])
    ids = lambda ds: [t for d in ds for t in d.token_ids]  # noqa: E731
    assert ids(mixed[0]) == ids(alone)
    for deltas in mixed[1:]:
        check_call(engine, deltas)


async def test_tool_choice_none_and_auto_answer_in_text_when_the_model_does_not_call(engine):
    msgs = [{"role": "user", "content": "when do you open"}]
    for choice in ("none", "auto", None):
        deltas = await run(engine, msgs, SamplingParams(max_new_tokens=8, tools=TOOLS,
                                                        tool_choice=choice))
        assert deltas[-1].tool_call is None and deltas[-1].finish_reason in ("stop", "length")
        first = deltas[0].token_ids[0] if deltas[0].token_ids else None
        assert first != engine.tokenizer.encode(TOOL_CALL_OPEN)[0]


async def test_auto_calls_when_the_call_opening_is_the_models_choice(tmp_path):
    """A model whose logits favour the opening token at every slot: `auto` decides to call,
    then the skeleton's constraints take over (the slots still decode to valid values)."""
    path = make_random_checkpoint(tmp_path, family="sdar", seed=1)
    eng = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True))
    open_id = eng.tokenizer.encode(TOOL_CALL_OPEN)[0]
    forward = eng.loaded.model.forward_step

    def biased(*args, **kwargs):
        logits = forward(*args, **kwargs)
        logits[..., open_id] += 1e4
        return logits

    eng.loaded.model.forward_step = biased
    try:
        for tools in (TOOLS[:1], TOOLS):
            deltas = await run(eng, [{"role": "user", "content": "book me"}],
                               SamplingParams(max_new_tokens=8, tools=tools, tool_choice="auto"))
            check_call(eng, deltas)
    finally:
        eng.close()


async def test_response_format_json_schema_validates(engine):
    schema = {"type": "object", "properties": {
        "answer": {"type": "string", "maxLength": 10},
        "confident": {"type": "boolean"},
        "when": {"type": "object", "properties": {
            "day": {"type": "string", "enum": ["monday", "friday"]},
            "time": {"type": ["string", "null"], "pattern": TIME}}},
        "count": {"type": "integer", "minimum": 1, "maximum": 3}}}
    fmt = {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema}}
    outs = await asyncio.gather(*[run(engine, [{"role": "user", "content": f"q{i}"}],
                                      SamplingParams(response_format=fmt, temperature=1.0,
                                                     seed=i)) for i in range(20)])
    for deltas in outs:
        assert deltas[-1].finish_reason == "stop" and deltas[-1].tool_call is None
        value = json.loads("".join(d.text for d in deltas))
        jsonschema.validate(value, schema)
        assert list(value) == list(schema["properties"])


@pytest.mark.parametrize("family", ["dream", "llada"])
async def test_bidirectional_families_decode_valid_calls(tmp_path, family):
    path = make_random_checkpoint(tmp_path, family=family, seed=3, init_std=0.5)
    eng = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                    max_running=20))
    try:
        outs = await asyncio.gather(*[run(eng, [{"role": "user", "content": f"c{i}"}],
                                          SamplingParams(tools=TOOLS, tool_choice="required",
                                                         block_size=8, temperature=1.0, seed=i))
                                      for i in range(20)])
        for deltas in outs:
            check_call(eng, deltas)
    finally:
        eng.close()


@pytest.mark.parametrize("params, message", [
    (dict(tools=[fn("f", {"xs": {"type": "array"}})], tool_choice="required"), "xs"),
    (dict(tools=[fn("f", {"x": {"type": "string", "pattern": "^[a-z]+$"}})],
          tool_choice="required"), "time-of-day"),
    (dict(tools=[fn("f", {"x": {"type": ["string", "null"]}})]), "nullable free string"),
    (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}),
     "not in tools"),
    (dict(tool_choice="required"), "needs tools"),
    (dict(response_format={"type": "json_schema", "json_schema": {"schema": {
        "type": "string"}}}), "object"),
    (dict(response_format={"type": "xml"}), "response_format.type"),
])
def test_unsupported_or_bad_schemas_are_rejected_before_queueing(engine, params, message):
    with pytest.raises(ValueError, match=message):
        engine.prepare([{"role": "user", "content": "hi"}], SamplingParams(**params))
    assert not engine.active_request_ids()


def test_layout_partitions_fixed_text_and_slots(engine):
    """Every position of a call's static layout is a fixed token or a slot, keys in order."""
    from diffvoice.engine.constrained.plan import build_plan

    plan = build_plan(TOOLS, {"type": "function", "function": {"name": "book_appointment"}},
                      None, engine.tokenizer, engine.model_config.eos_token_ids[0])
    layout = plan.layouts["book_appointment"]
    slot_positions = {s + j for s, slot in layout.slots for j in range(slot.width)}
    assert set(layout.fixed) | slot_positions == set(range(layout.length))
    assert not set(layout.fixed) & slot_positions
    assert layout.fixed[layout.length - 1] in engine.model_config.eos_token_ids
    text = engine.tokenizer.tokenizer.decode(
        [layout.fixed[r] for r in sorted(layout.fixed)][:-1], skip_special_tokens=False)
    assert text.startswith(TOOL_CALL_OPEN + '\n{"name": "') and text.endswith(TOOL_CALL_CLOSE)
    at = 0
    for key in ("arguments", "service", "day", "time", "name"):  # every key laid, in order
        at = text.index(f'"{key}": ', at) + 1
    assert torch.tensor(list(layout.fixed.values())).ne(engine.runner.mask_id).all()


# --- the canvas follows the wire text the model was trained on ----------------------------------

# the added tokens of the receptionist's tokenizer (engine/train/build_tokenizer.py, recep)
RECEPTIONIST_TOOL_TOKENS = (
    "<tool_call>", "</tool_call>", '{"name": "', '", "arguments": {', '", ', '"}}',
    '"service": "', '"day": "', '"time": "', '"name": "', '"time": null}}',
    "check_availability", "book_appointment", "cancel_appointment")


def _tokenizer(tmp_path, added: tuple[str, ...]):
    from tokenizers import AddedToken, Tokenizer

    from diffvoice.engine.testing import make_tokenizer
    from diffvoice.engine.tokenizer import ChatTokenizer

    make_tokenizer(tmp_path)
    tok = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in added])
    tok.save(str(tmp_path / "tokenizer.json"))
    return ChatTokenizer.from_dir(tmp_path)


def _fill(layout, values: list, vocab) -> tuple[list[int], list[int]]:
    """Canvas tokens of a call with the given slot values, and the same without the pads."""
    from diffvoice.engine.constrained.slots import Choice

    canvas, unpadded, slots = [], [], dict(layout.slots)
    r = 0
    values = iter(values)
    while r < layout.length:
        if r in slots:
            slot, value = slots[r], next(values)
            if isinstance(slot, Choice):
                k = slot.values.index(value)
                row, live = slot.seqs[k], slot.lengths[k]
            else:
                body = vocab.encode(value)
                row = body + [slot.terminator] + [vocab.pad] * (slot.width - len(body) - 1)
                live = len(body) + 1
            canvas += row
            unpadded += row[:live]
            r += slot.width
        else:
            canvas.append(layout.fixed[r])
            unpadded.append(layout.fixed[r])
            r += 1
    return canvas, unpadded


RECEPTIONIST_TOOLS = [
    fn("check_availability", {"service": TOOLS[0]["function"]["parameters"]["properties"][
        "service"], "day": TOOLS[0]["function"]["parameters"]["properties"]["day"],
        "time": {"type": ["string", "null"], "pattern": TIME}}, ["service", "day"]),
    fn("book_appointment", {k: v for k, v in TOOLS[0]["function"]["parameters"][
        "properties"].items()}),
    fn("cancel_appointment", {"name": {"type": "string", "maxLength": 12},
                              "day": TOOLS[0]["function"]["parameters"]["properties"]["day"]}),
]
CALLS = [
    ("book_appointment", {"service": "teeth whitening", "day": "friday", "time": "10:00",
                          "name": "ann lee"}),
    ("check_availability", {"service": "cleanings", "day": "monday", "time": None}),
    ("check_availability", {"service": "fillings", "day": "sunday", "time": "14:30"}),
    ("cancel_appointment", {"name": "bo", "day": "tuesday"}),
]


@pytest.mark.parametrize("added", [(), RECEPTIONIST_TOOL_TOKENS], ids=["bpe", "tool-tokens"])
def test_canvas_without_pads_is_the_wire_tokenization(tmp_path, added):
    """Filled with canonical values, the laid canvas minus its pads is token for token the
    tokenization of the wire text (what a trained model saw), and with its pads it still
    decodes to the same JSON."""
    from diffvoice.engine.constrained.plan import build_plan

    tok = _tokenizer(tmp_path, added)
    plan = build_plan(RECEPTIONIST_TOOLS, "required", None, tok, 0)
    for name, args in CALLS:
        layout = plan.layouts[name]
        wire = (f"{TOOL_CALL_OPEN}\n"
                + json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
                + f"\n{TOOL_CALL_CLOSE}")
        values = [name] + [v for v in args.values()]
        canvas, unpadded = _fill(layout, values, plan.vocab)
        if added:  # the receptionist tokenizer: exact, Free slots included
            assert unpadded == tok.encode(wire) + [0], name
        text = tok.tokenizer.decode(canvas[:-1], skip_special_tokens=False)
        body = text[len(TOOL_CALL_OPEN) + 1: text.rindex("\n" + TOOL_CALL_CLOSE)]
        assert json.loads(body) == {"name": name, "arguments": args}
        if not added:  # plain BPE: the value-bearing Choice slots still match exactly
            assert tok.tokenizer.decode(unpadded[:-1], skip_special_tokens=False) == wire


# --- response_format json_object: the character automaton ---------------------------------------

def _accepts(text: str) -> bool:
    from diffvoice.engine.constrained.json_free import step

    state = ((), "start", "")
    for ch in text:
        state = step(state, ch)
        if state is None:
            return False
    return state[1] == "done"


def _json_object(text: str) -> bool:
    def reject(_):
        raise ValueError("not JSON")

    try:
        value = json.loads(text, parse_constant=reject)
    except ValueError:
        return False
    return isinstance(value, dict) and text == text.strip()


def test_json_automaton_agrees_with_json_loads_on_random_strings():
    import random

    rng = random.Random(0)
    docs = ['{}', '{"a": 1}', '{"a": [1, 2.5, -3e2, true, false, null]}',
            '{"k": {"x": "y\\n\\u00e9\\"q"}, "z": []}', '{"a":0,"b":-0.0E+1}', '{ "s" : "" }']
    alphabet = list('{}[]":,. -+0123456789eEtrufalsn\\ab') + ["\n"]
    for doc in docs:
        assert _accepts(doc), doc
        for cut in range(len(doc)):  # every prefix of a document is still alive
            from diffvoice.engine.constrained.json_free import step

            state = ((), "start", "")
            for ch in doc[:cut]:
                state = step(state, ch)
            assert state is not None, doc[:cut]
    for _ in range(20000):
        base = list(rng.choice(docs))
        for _ in range(rng.randint(1, 3)):
            i = rng.randrange(len(base) + 1)
            op = rng.random()
            if op < 0.4 and base:
                del base[min(i, len(base) - 1)]
            elif op < 0.8:
                base.insert(i, rng.choice(alphabet))
            elif base:
                base[min(i, len(base) - 1)] = rng.choice(alphabet)
        text = "".join(base)
        assert _accepts(text) == _json_object(text), text


async def test_response_format_json_object_is_always_one_object(engine):
    fmt = {"type": "json_object"}
    outs = await asyncio.gather(*[run(engine, [{"role": "user", "content": f"j{i}"}],
                                      SamplingParams(response_format=fmt, max_new_tokens=n,
                                                     temperature=t, seed=i))
                                  for i, (n, t) in enumerate([(8, 0.0), (24, 1.5), (40, 2.0)] * 8)])
    shapes = set()
    for deltas in outs:
        assert deltas[-1].finish_reason == "stop"
        value = json.loads("".join(d.text for d in deltas))
        assert isinstance(value, dict)
        shapes.add(len(value))
    assert len(shapes) > 1  # not just "{}": keys get written


async def test_ignore_eos_and_every_policy_still_end_in_a_valid_call(engine):
    outs = await asyncio.gather(*[run(engine, [{"role": "user", "content": f"p{i}"}],
                                      SamplingParams(tools=TOOLS, tool_choice="required",
                                                     policy=policy, ignore_eos=i % 2 == 0,
                                                     steps_per_block=2, seed=i, temperature=1.0))
                                  for i, policy in enumerate(
                                      ["low_confidence", "threshold", "entropy"] * 2)])
    for deltas in outs:
        check_call(engine, deltas)
