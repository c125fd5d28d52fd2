"""BenchConfig validation, flag parsing, and `bench render`."""

import argparse

import numpy as np
import pytest

from diffvoice.latency_bench import cli
from diffvoice.latency_bench.config import BenchConfig
from diffvoice.latency_bench.corpus import Prompt
from diffvoice.latency_bench.report import SweepPoint, build_report, load_report, save_report


def _parse(*argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(list(argv))


@pytest.mark.parametrize("fields, message", [
    ({"protocol": "sip"}, "protocol"),
    ({"url": "http://h:1/ws"}, "url must be ws/wss"),
    ({"concurrency": (1, 1)}, "distinct"),
    ({"concurrency": (0,)}, "concurrency"),
    ({"turns": 0}, "turns"),
    ({"stop_secs": 9.0}, "stop_secs"),
    ({"protocol": "twilio", "stop_secs": 0.4}, "per session"),
    ({"out": "report.txt"}, ".json"),
    ({"energy_threshold_db": 3.0}, "energy_threshold_db"),
    ({"kokoro_speeds": (3.0,)}, "kokoro_speeds"),
    ({"kokoro_voices": ("jm_kumo",), "audio": "/tmp/mine"}, "--audio"),
    ({"protocol": "twilio", "matrix": "drafting=off,on"}, "matrix drafting"),
    ({"stop_secs": 0.3, "matrix": "stop_secs=0.2,0.4"}, "either"),
    ({"corpus": "poems"}, "corpus"),
])
def test_bad_settings_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        BenchConfig(**fields)


def test_derived_settings():
    config = BenchConfig(turns=3, min_turns=16)
    assert [config.turns_per_session(c) for c in (1, 2, 4, 8, 16)] == [16, 8, 4, 3, 3]
    assert config.shared_clock
    assert BenchConfig(url="ws://127.0.0.1:9/ws").shared_clock
    assert not BenchConfig(url="wss://voice.example.com/ws").shared_clock
    assert BenchConfig(protocol="twilio", url="https://x.example/telephony/twilio/voice")
    # over Twilio the server-side axes are allowed (stop_secs becomes --stop-secs)
    assert BenchConfig(protocol="twilio", matrix="smart_turn=off,on stop_secs=0.2,0.4")


def test_flags_map_one_to_one_onto_the_config():
    args = _parse("voice", "--concurrency", "1,3", "--voices", "en-us,en-gb", "--speeds", "160",
                  "--stop-secs", "0.3", "--no-progress", "--turn-timeout-s", "12")
    names = set(vars(args)) - {"bench_command"}
    assert names == set(BenchConfig.__dataclass_fields__)
    config = BenchConfig(**{n: getattr(args, n) for n in names})
    assert config.concurrency == (1, 3) and config.voices == ("en-us", "en-gb")
    assert config.speeds == (160,) and config.stop_secs == 0.3 and not config.progress
    args = _parse("voice", "--corpus", "turns", "--kokoro-voices", "jm_kumo,jf_gongitsune",
                  "--kokoro-speeds", "0.9,1.15", "--holdout-voices", "jm_kumo",
                  "--matrix", "smart_turn=off,on stop_secs=0.2,0.4")
    config = BenchConfig(**{n: getattr(args, n) for n in names})
    assert config.corpus == "turns" and config.kokoro_voices == ("jm_kumo", "jf_gongitsune")
    assert config.kokoro_speeds == (0.9, 1.15) and config.holdout_voices == ("jm_kumo",)
    assert _parse("voice").kokoro_voices == ()


def test_corpus_info_names_the_hold_out_and_counts_kinds():
    pcm = np.zeros(1600, np.int16)
    pcm[400:800] = 3000

    def prompt(voice, kind="question"):
        return Prompt(name=voice, text="x", pcm=pcm, speech_start_s=0.025, speech_end_s=0.05,
                      voice=voice, kind=kind)

    config = BenchConfig(corpus="turns", voices=("en-us",), kokoro_voices=("jm_kumo",))
    info = cli.corpus_info(config, [prompt("en-us"), prompt("jm_kumo", "slot"),
                                    prompt("jm_kumo")])
    assert info["kinds"] == {"question": 2, "slot": 1}
    assert info["holdout_voices"] == ["jm_kumo"] and info["development_voices"] == ["en-us"]
    assert info["source"] == "espeak-ng + Kokoro-82M turns prompts"


def test_render_adds_notes_and_rewrites_outputs(tmp_path, capsys):
    rng = np.random.default_rng(0)
    report = build_report(kind="voice", config={}, points=[
        SweepPoint(concurrency=c, samples={"voice_to_voice_ms": rng.normal(900, 50, 8).tolist()},
                   turns=8) for c in (1, 2)])
    path = save_report(report, tmp_path / "r.json")
    (tmp_path / "notes.md").write_text("Endpointing dominates.\n")
    assert cli.run(_parse("render", str(path), "--notes", str(tmp_path / "notes.md"))) == 0
    assert load_report(path)["notes"] == "Endpointing dominates."
    assert "Endpointing dominates." in (tmp_path / "r.md").read_text()
    assert (tmp_path / "r-concurrency.png").exists() and (tmp_path / "r.html").exists()
    path.write_text("{not json")
    assert cli.run(_parse("render", str(path))) == 2
    assert "not JSON" in capsys.readouterr().err


def test_server_health_keeps_the_servers_own_description():
    """`bench voice --url` records the server's machine and versions from its /healthz."""
    import http.server
    import json
    import threading

    from diffvoice.latency_bench.server_proc import server_health

    body = json.dumps({"status": "ok", "model": "m", "machine": {"cpus": 64},
                       "versions": {"torch": "9.9"}, "secret": "x"}).encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        health = server_health(f"ws://127.0.0.1:{httpd.server_port}/ws")
    finally:
        httpd.shutdown()
        thread.join(10)
    assert health == {"model": "m", "machine": {"cpus": 64}, "versions": {"torch": "9.9"}}
