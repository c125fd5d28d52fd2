"""The load generator against the real server on loopback: a tiny sweep, /metrics, Twilio mode.

One `diffvoice serve` process, started the way `bench voice` starts it, serves every test here.
Its model is the embedded default (models/receptionist-tiny) when it is in the tree, since that
answers in words that the TTS can speak. Without it, a random-weight checkpoint whose seed was
picked because its babble is ASCII words (" b b b ..."): most random seeds babble byte
fragments that are not valid text, so those turns never get any bot audio to measure.
"""

import asyncio
import json
import os
import secrets
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffvoice.latency_bench import cli
from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import RECEPTIONIST_PROMPTS, default_corpus
from diffvoice.latency_bench.load import make_report, run_sweep
from diffvoice.latency_bench.outputs import write_outputs
from diffvoice.latency_bench.report import VOICE_STAGES, load_report
from diffvoice.latency_bench.server_proc import LocalServer

SCALE = float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
STOP_SECS = 0.5
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(900 * SCALE))]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from diffvoice.engine import DEFAULT_MODEL_DIR
    from diffvoice.engine.testing import make_random_checkpoint

    if (DEFAULT_MODEL_DIR / "config.json").exists():
        model = DEFAULT_MODEL_DIR
    else:
        model = make_random_checkpoint(tmp_path_factory.mktemp("model"), family="sdar", seed=3)
    token = secrets.token_hex(8)
    latency_log = tmp_path_factory.mktemp("log") / "latency.jsonl"
    local = LocalServer(["--model", str(model), "--max-new-tokens", "16", "--stop-secs",
                         str(STOP_SECS), "--asr", "pocketsphinx", "--device", "cpu",
                         "--latency-log", str(latency_log)],
                        start_timeout_s=300 * SCALE, env={"TWILIO_AUTH_TOKEN": token})
    local.latency_log = latency_log
    local.extra_args += ["--public-url", local.base_url]
    with local:
        local.twilio_token = token
        yield local


@pytest.fixture(scope="module")
def prompts(tmp_path_factory):
    return default_corpus(tmp_path_factory.mktemp("corpus"), voices=("en-us", "en-us+f3"),
                          speeds=(175,), texts=RECEPTIONIST_PROMPTS[:3])


@pytest.fixture(scope="module")
def sweep(server, prompts, tmp_path_factory):
    config = BenchConfig(url=server.ws_url("/ws"), concurrency=(1, 2), turns=2, min_turns=2,
                         stagger_s=0.5, turn_timeout_s=90 * SCALE, progress=False)
    levels = asyncio.run(run_sweep(config, config.url, prompts))
    report = make_report(config, levels, url=config.url, corpus={"prompts": len(prompts)})
    out = tmp_path_factory.mktemp("report") / "voice.json"
    return levels, report, write_outputs(report, out)


def _describe(turn):
    """A failed turn with its server timestamps relative to the end of speech, for the log."""
    def rel(t):
        return None if t is None or turn.speech_end_t is None else round(t - turn.speech_end_t, 3)
    times = {k: rel(v) for k, v in turn.server.items() if k.endswith("_t")}
    return (f"level {turn.concurrency} session {turn.session} turn {turn.turn} {turn.status}: "
            f"{turn.message}; prompt {turn.prompt!r} heard {turn.transcript!r} bot "
            f"{turn.bot_text[:60]!r}; server {times} interrupted="
            f"{turn.server.get('interrupted')} user_text={turn.server.get('user_text')!r}; "
            f"first audible {rel(turn.first_audible_t)}; pacing lag {turn.send_lag_ms:.0f} ms")


def test_tiny_sweep_measures_every_stage_in_order(sweep):
    levels, report, written = sweep
    failures = [_describe(t) for lv in levels for t in lv.turns if t.status != "ok"]
    assert not failures, "\n".join(failures)
    assert [p["concurrency"] for p in report["sweep"]] == [1, 2]
    for point in report["sweep"]:
        assert point["turns"] == 2 * point["concurrency"]
        assert point["errors"] == point["timeouts"] == 0
    assert report["config"]["stop_secs"] == STOP_SECS
    assert report["config"]["asr"] and report["config"]["tts"] and report["config"]["model"]
    for lv in levels:
        for turn in lv.turns:
            s = turn.stages(shared_clock=True)
            missing = set(VOICE_STAGES) - set(s)
            assert not missing, f"{sorted(missing)} not measured: {_describe(turn)} {turn.server}"
            assert all(v >= 0 for v in s.values()), s
            # the server cannot stop before stop_secs of silence has passed (VAD windows: 32 ms)
            assert s["endpointing_ms"] >= STOP_SECS * 1000 - 100, s
            assert s["endpointing_ms"] <= s["voice_to_voice_ms"], s
            assert s["server_ms"] <= s["voice_to_voice_ms"], s
            # endpointing ends when the turn ends; the server's share after that is the rest
            # (first_audio_sent_t is stamped when the server's write returned: on a loaded
            # machine the loopback client can hold the frame a few ms before that)
            after_turn_ms = (turn.server["first_audio_sent_t"] - turn.server["turn_end_t"]) * 1e3
            assert s["endpointing_ms"] + after_turn_ms <= s["voice_to_voice_ms"] + 30, s
            assert s["asr_ms"] + s["llm_ttft_ms"] + s["tts_first_audio_ms"] <= (
                s["server_ms"] + 1), s
            assert turn.transcript and turn.bot_text, turn
            assert turn.first_frame_t <= turn.first_audible_t <= turn.last_audible_end_t
    for point in report["sweep"]:
        for stage in VOICE_STAGES:
            assert point["stages"][stage]["count"] == point["turns"], stage
    saved = load_report(written["json"])
    assert saved["sweep"] == report["sweep"] and len(saved["turns"]) == 6
    assert "| 2 | 4 | 0 | 0 |" in written["md"].read_text()
    assert written["html"].read_text().count("data:image/png;base64,") == 2


def _scrape(server):
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=30) as response:
        text = response.read().decode("utf-8")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_metrics_scrape_parses_after_calls(server, sweep):
    levels, _, _ = sweep
    measured = sum(t.status == "ok" for lv in levels for t in lv.turns)
    samples = _scrape(server)
    # a closed client's session is torn down by the server after the socket closes: on a busy
    # machine the gauge can lag the last close (seen once in a clean-clone run), so wait for it
    deadline = time.monotonic() + 10 * SCALE
    while samples[("diffvoice_active_sessions", ())] != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        samples = _scrape(server)
    for stage in ("endpointing", "asr", "llm_ttft", "tts_first_audio", "server"):
        count = samples[("diffvoice_turn_stage_seconds_count", (("stage", stage),))]
        assert count >= measured, stage
        assert samples[("diffvoice_turn_stage_seconds_sum", (("stage", stage),))] > 0
    assert samples[("diffvoice_sessions_total", ())] >= 3
    assert samples[("diffvoice_engine_up", ())] == 1
    assert samples[("diffvoice_engine_queue_depth", ())] == 0
    assert ("diffvoice_engine_batch_size", ()) in samples
    assert samples[("diffvoice_active_sessions", ())] == 0      # every bench session closed


def test_cli_twilio_protocol_measures_voice_to_voice(server, tmp_path):
    out = tmp_path / "twilio.json"
    parser = cli.argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([
        "voice", "--protocol", "twilio", "--url", server.base_url + "/telephony/twilio/voice",
        "--twilio-auth-token", server.twilio_token, "--concurrency", "1", "--turns", "1",
        "--min-turns", "1", "--voices", "en-us", "--speeds", "175",
        "--corpus-cache", str(tmp_path / "corpus"), "--turn-timeout-s", str(90 * SCALE),
        "--out", str(out), "--no-progress", "--server-log", str(server.latency_log)])
    assert cli.run(args) == 0
    report = json.loads(out.read_text())
    point = report["sweep"][0]
    assert point["turns"] == 1 and point["errors"] == point["timeouts"] == 0, point
    assert point["stages"]["voice_to_voice_ms"]["count"] == 1
    assert point["stages"]["voice_to_voice_ms"]["p50"] > STOP_SECS * 1000
    # not carried by Media Streams: the turn's server record, read from the server's log
    turn = report["turns"][0]
    assert turn["server"]["session_id"].startswith("twilio-") and turn["transcript"], turn
    assert point["stages"]["asr_ms"]["count"] == 1
    assert 0 < point["stages"]["endpointing_ms"]["p50"] < point["stages"]["voice_to_voice_ms"][
        "p50"]
    assert report["config"]["model"] and report["config"]["protocol"] == "twilio"


def test_cli_realtime_protocol_measures_voice_to_voice(server, tmp_path):
    """`bench voice --protocol realtime`: the same corpus and report over /v1/realtime; the
    turn's server record comes from the log (the same record as over /ws), and the Realtime
    stage speech_stopped -> first output_audio.delta is reported."""
    out = tmp_path / "realtime.json"
    parser = cli.argparse.ArgumentParser()
    cli.add_arguments(parser)
    args = parser.parse_args([
        "voice", "--protocol", "realtime", "--url", server.ws_url("/v1/realtime"),
        "--concurrency", "1", "--turns", "2", "--min-turns", "2", "--voices", "en-us",
        "--speeds", "175", "--corpus-cache", str(tmp_path / "corpus"),
        "--turn-timeout-s", str(90 * SCALE), "--out", str(out), "--no-progress",
        "--server-log", str(server.latency_log)])
    assert cli.run(args) == 0
    report = json.loads(out.read_text())
    point = report["sweep"][0]
    assert point["turns"] == 2 and point["errors"] == point["timeouts"] == 0, point
    assert point["stages"]["voice_to_voice_ms"]["count"] == 2
    assert point["stages"]["voice_to_voice_ms"]["p50"] > STOP_SECS * 1000
    assert point["stages"]["speech_stopped_to_audio_ms"]["count"] == 2
    turn = report["turns"][0]
    assert turn["server"]["session_id"].startswith("sess_") and turn["transcript"], turn
    assert turn["server"]["response_status"] == "completed"
    assert point["stages"]["server_ms"]["count"] == 2
    assert report["config"]["protocol"] == "realtime"
