"""latency_bench.server_records: a Twilio call's turns get the server's records from its latency
log, through the CallSid -> session of the playout records, nearest speech end within the
window, each record once; a cut-off at a pause, another call's records and broken lines are
left out."""

from __future__ import annotations

import json

import pytest

from diffvoice.latency_bench.load import LevelResult
from diffvoice.latency_bench.server_records import attach_server_records
from diffvoice.latency_bench.turns import TurnResult

T0 = 1_800_000_000.0


def _turn(session: int, turn: int, end: float | None, status: str = "ok") -> TurnResult:
    t = TurnResult(concurrency=2, session=session, turn=turn, prompt=f"p{turn}",
                   speech_end_t=end)
    t.status = status
    return t


def _latency(session_id: str, turn: int, end: float, text: str) -> dict:
    return {"session_id": session_id, "turn": turn, "speech_end_t": end,
            "vad_stop_t": end + 0.2, "turn_end_t": end + 0.25, "user_text": text,
            "bot_text": f"re {text}", "answer_ready": True, "asr_ms": 12.0}


def test_turns_get_their_calls_records(tmp_path):
    level = LevelResult(level=2, sessions=[{"session": 0, "call_sid": "CA0"},
                                           {"session": 1, "call_sid": "CA1"}])
    level.turns = [_turn(0, 1, T0 + 1.0), _turn(0, 2, T0 + 5.0), _turn(0, 3, T0 + 9.0),
                   _turn(1, 1, T0 + 1.02), _turn(1, 2, T0 + 6.0, status="error"),
                   _turn(1, 3, None)]
    records = [
        {"type": "telephony.playout", "session_id": "twilio-a", "call_sid": "CA0", "turn": 1},
        {"type": "telephony.playout", "session_id": "twilio-b", "call_sid": "CA1", "turn": 1},
        _latency("twilio-a", 1, T0 + 1.06, "one"),          # the VAD's estimate, a bit late
        _latency("twilio-a", 2, T0 + 4.1, "cut"),           # ended at a pause mid-prompt
        _latency("twilio-a", 3, T0 + 5.3, "two"),
        _latency("twilio-a", 4, T0 + 9.0 - 0.1, "three"),
        _latency("twilio-b", 1, T0 + 1.0, "other call"),
        _latency("twilio-b", 2, T0 + 6.0, "failed turn's"),
    ]
    log = tmp_path / "latency.jsonl"
    log.write_text("\n".join(json.dumps(r) for r in records) + "\n{\"type\": \"lat")  # cut line
    assert attach_server_records([level], log) == 4
    got = {(t.session, t.turn): (t.transcript, t.bot_text) for t in level.turns}
    assert got[(0, 1)] == ("one", "re one")
    assert got[(0, 2)] == ("two", "re two")  # not the cut-off's record, 0.9 s before the end
    assert got[(0, 3)] == ("three", "re three")
    assert got[(1, 1)] == ("other call", "re other call")  # its own call's record only
    assert got[(1, 2)] == (None, "") and got[(1, 3)] == (None, "")
    assert level.turns[0].server["answer_ready"] is True
    # endpointing from the client's true end of speech to the server's turn end
    assert level.turns[0].stages(True)["endpointing_ms"] == pytest.approx(310.0, abs=0.01)


def test_a_record_serves_one_turn_and_unknown_calls_get_none():
    level = LevelResult(level=1, sessions=[{"session": 0, "call_sid": "CA0"},
                                           {"session": 1, "call_sid": "CA9"}])
    level.turns = [_turn(0, 1, T0 + 1.0), _turn(0, 2, T0 + 1.3), _turn(1, 1, T0 + 1.0)]
    records = [{"type": "telephony.playout", "session_id": "s", "call_sid": "CA0"},
               _latency("s", 1, T0 + 1.1, "only")]
    assert attach_server_records([level], records) == 1
    assert [t.transcript for t in level.turns] == ["only", None, None]


def test_a_spawned_twilio_server_writes_a_latency_log_unless_given_one():
    from diffvoice.latency_bench.server_proc import bench_server

    server, token = bench_server("twilio", "--asr pocketsphinx", 1.0)
    try:
        assert token and server.latency_log is not None
        i = server.extra_args.index("--latency-log")
        assert server.extra_args[i + 1] == str(server.latency_log)
    finally:
        server.latency_log.unlink(missing_ok=True)
    assert server.owns_latency_log
    for given in ("--latency-log /tmp/mine.jsonl", "--latency-log=/tmp/mine.jsonl"):
        mine, _ = bench_server("twilio", given, 1.0)  # the server args' own log is read
        assert str(mine.latency_log) == "/tmp/mine.jsonl" and not mine.owns_latency_log
        assert sum(a.startswith("--latency-log") for a in mine.extra_args) == 1
    browser, _ = bench_server("browser", "", 1.0)
    assert browser.latency_log is None and "--latency-log" not in browser.extra_args


def test_a_log_level_in_the_server_args_goes_before_serve():
    from diffvoice.latency_bench.server_proc import LocalServer

    command = LocalServer("--asr pocketsphinx --log-level DEBUG --stop-secs 0.2").command()
    serve = command.index("serve")
    assert command[serve - 2:serve] == ["--log-level", "DEBUG"]
    assert command[serve + 5:] == ["--asr", "pocketsphinx", "--stop-secs", "0.2"]
