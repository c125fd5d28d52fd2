"""The pure pieces of the reliability harness's attacks part (issue 39's ten findings) and of
its generated-schema fuzz family: the requests are the ones the issue describes, the Twilio
start is one the server's own parser accepts, bookings are seeded and read back as the server
stores them, and legitimate turns are attributed to the phases they overlapped. The parts
themselves run against a real server in test_reliability_short.py."""

import asyncio
import json
import random

import pytest

from diffvoice.latency_bench.reliability import (
    attack_api,
    attack_booking,
    attack_phone,
    attacks,
    common,
    fuzz_cases,
    report,
    scales,
)
from diffvoice.latency_bench.turns import TurnResult
from diffvoice.voice.telephony.handshake import parse_start


def _body(extra: str) -> dict:
    return json.loads(attack_api.chat_body("m", "hello", extra))


def test_client_mistakes_are_the_issues_cases_in_both_places():
    names = [name for name, _, _ in attack_api.CLIENT_MISTAKES]
    assert len(names) == len(set(names)) == 15  # 7 schema values x (tools, response_format) + 1
    for name, extra, field in attack_api.CLIENT_MISTAKES:
        body = _body(extra)  # valid JSON (1e400 stays the number the client wrote)
        assert field in extra, name
        if name.startswith("tools"):
            assert body["tool_choice"] == "required"
            assert "x" in body["tools"][0]["function"]["parameters"]["properties"]
        elif name.startswith("response_format"):
            assert body["response_format"]["type"] == "json_schema"
    assert '"maxLength": 1e400' in dict((n, e) for n, e, _ in attack_api.CLIENT_MISTAKES)[
        "tools: maxLength 1e400"]


def test_hostile_bodies_are_what_the_issue_sent():
    huge = _body(attack_api.property_tools(attack_api.HUGE_MAX_LENGTH))
    schema = huge["tools"][0]["function"]["parameters"]["properties"]["x"]
    assert schema["maxLength"] == 1e30 and huge["tool_choice"] == "required"
    many = attack_api.chat_body("m", "hi", attack_api.many_tools(5000))
    assert 400_000 < len(many) < (1 << 20)  # ~530 KB: under the server's 1 MiB body cap
    assert len(json.loads(many)["tools"]) == 5000
    redos = _body(attack_api.property_tools(json.dumps({"type": "string",
                                                        "pattern": attack_api.REDOS_PATTERN})))
    assert redos["tools"][0]["function"]["parameters"]["properties"]["x"]["pattern"] == \
        r"(\d?\d?\d?\d?\d?:?){8}y"


def test_innocent_requests_are_distinct_and_greedy():
    bodies = [json.loads(attack_api.chat_body("m", attack_api.innocent_content(i)))
              for i in range(8)]
    assert len({b["messages"][0]["content"] for b in bodies}) == 8
    assert all(b["temperature"] == 0 for b in bodies)


def test_replies_are_read_as_answers_and_errors():
    ok = attack_api.Reply(200, 5.0, json.dumps({"choices": [{"message": {"content": "Hi."}}]}))
    tool = attack_api.Reply(200, 5.0, json.dumps({"choices": [{"message": {
        "content": None, "tool_calls": [{"function": {"name": "f"}}]}}]}))
    bad = attack_api.Reply(400, 1.0, json.dumps({"error": {"message": "tools: at most 64"}}))
    assert attack_api.answer_of(ok) == "Hi."
    assert '"f"' in attack_api.answer_of(tool)
    assert attack_api.answer_of(bad) is None and attack_api.error_of(bad) == "tools: at most 64"
    assert attack_api.error_of(attack_api.Reply(-1, 0, "not json")) == "not json"


def test_twilio_start_is_accepted_by_the_servers_parser():
    params = {"CallSid": "CA1", "From": "+15550100", "token": "v2.1.a.b"}
    start = parse_start(json.loads(attack_phone.start_message("CA" + "1" * 32, params)))
    assert start.call_sid == "CA" + "1" * 32 and start.custom_parameters == params


def test_seeded_bookings_belong_to_their_owners_and_read_back(tmp_path):
    from diffvoice.engine import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "facts.yaml").exists():
        pytest.skip("the embedded model's fact sheet is not in the tree")
    db = str(tmp_path / "book.sqlite3")
    wanted = [(attack_booking.NAME, "session:a"), (attack_booking.OTHER_SPELLING,
                                                   attack_booking.OTHER_OWNER),
              (attack_booking.NAME, "session:b")]  # the same name twice: two free times
    ids = attack_booking.seed(db, str(DEFAULT_MODEL_DIR), wanted)
    rows = attack_booking.visits(db)
    assert None not in ids and len(set(ids)) == 3
    assert [(name, owner) for _, name, owner in rows] == wanted
    assert [row[0] for row in rows] == ids


def test_turns_are_attributed_to_the_phases_they_overlapped():
    records = [(0.0, 5.0, "browser", "a"), (5.0, 9.0, "browser", "b"),
               (1.0, 12.0, "twilio", "c")]
    assert attacks.overlapping(records, 6.0, 7.0) == ["b", "c"]
    assert attacks.overlapping(records, 9.5, 20.0) == ["c"]
    assert attacks.overlapping(records, 12.0, 13.0) == []


def test_server_ms_comes_from_answered_browser_turns():
    def turn(server_ms, status="ok"):
        t = TurnResult(concurrency=1, session=0, turn=1, prompt="p", status=status)
        t.server, t.transcript, t.bot_text, t.first_audible_t = \
            {"server_ms": server_ms}, "hi", "Hello.", 1.0
        return t

    turns = [turn(100.0), turn(300.0), turn(None), turn(900.0, status="error")]
    assert attacks.server_ms(turns) == [100.0, 300.0]
    assert attacks.p99([]) is None and attacks.p99([100.0, 300.0]) == pytest.approx(298.0)


def test_generated_schema_cases_expect_200_or_4xx_and_are_seeded():
    cases = fuzz_cases.schema_cases(random.Random(5), 60, "m")
    again = fuzz_cases.schema_cases(random.Random(5), 60, "m")
    assert [c.payload for c in cases] == [c.payload for c in again]
    assert len(cases) == 60 and {c.surface for c in cases} == {"v1"}
    assert {c.family for c in cases} == {"generated_schema"}
    allowed = set(cases[0].expect_status)
    assert 200 in allowed and 400 in allowed and 422 in allowed and 500 not in allowed
    bodies = [json.loads(c.payload) for c in cases]  # NaN / Infinity as Python writes them
    assert any("tools" in b for b in bodies) and any("response_format" in b for b in bodies)


def test_every_part_has_a_title_and_both_scales_the_same_keys():
    assert "attacks" in scales.PARTS
    assert set(scales.SCALES["short"]) == set(scales.SCALES["full"])
    assert scales.SCALES["short"]["atk_booking_attempts"] >= 3  # pocketsphinx mishears names
    assert set(scales.PARTS) <= set(report.TITLES) and set(scales.PARTS) <= set(report.ORDER)
    full = scales.SCALES["full"]
    assert full["fuzz_schemas"] >= 2000 and full["fuzz_inputs"] >= 10_000
    assert full["atk_slow_heads"] == 300 and full["atk_slow_upgrades"] == 200


def test_cluster_metrics_take_the_worst_worker_for_max_gauges(monkeypatch):
    text = "\n".join([
        "# TYPE diffvoice_engine_worker_prepare_max_ms gauge",
        'diffvoice_engine_worker_prepare_max_ms{replica="0"} 3.0',
        'diffvoice_engine_worker_prepare_max_ms{replica="1"} 40.0',
        "# TYPE diffvoice_active_sessions gauge",
        'diffvoice_active_sessions{replica="0"} 2.0',
        'diffvoice_active_sessions{replica="1"} 3.0',
        "# TYPE diffvoice_engine_max_running gauge",  # a max that is a count: summed
        'diffvoice_engine_max_running{replica="0"} 16.0',
        'diffvoice_engine_max_running{replica="1"} 16.0', ""])
    monkeypatch.setattr(common, "_get", lambda url, timeout=10.0: text.encode())

    class _Server:
        base_url = "http://127.0.0.1:1"

    ctx = common.Ctx(_Server(), [], "t", settings={"workers": 2})
    got = asyncio.run(common.metrics(ctx))
    assert got["diffvoice_engine_worker_prepare_max_ms"] == 40.0
    assert got["diffvoice_active_sessions"] == 5.0
    assert got["diffvoice_engine_max_running"] == 32.0
