"""ServeConfig: validation names the field; defaults < file < env < flags."""

from __future__ import annotations

import argparse
import json

import pytest

from diffvoice.voice.config import ServeConfig, add_arguments


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_precedence_defaults_file_env_flags(tmp_path):
    path = tmp_path / "serve.json"
    path.write_text(json.dumps({"port": 9001, "stop-secs": 0.7, "tts": "espeak", "asr": "tiny.en"}))
    env = {"DIFFVOICE_PORT": "9002", "DIFFVOICE_API_KEYS": "a, b", "TWILIO_AUTH_TOKEN": "tok",
           "DIFFVOICE_TWILIO_VALIDATE": "false"}  # fmt: skip
    args = _parse(["--config", str(path), "--stop-secs", "0.3", "--no-smart-turn"])
    config = ServeConfig.from_sources(args, env=env)
    assert config.port == 9002  # env beats file
    assert config.stop_secs == 0.3  # flag beats file
    assert config.asr == "tiny.en"  # file beats default
    assert config.api_keys == ("a", "b") and config.twilio_auth_token == "tok"
    assert config.twilio_validate is False and config.smart_turn is False
    assert config.host == "127.0.0.1" and config.max_new_tokens == 48  # defaults
    assert config.public_dict()["twilio_auth_token"] == "***"


def test_yaml_file_and_unknown_keys(tmp_path):
    good = tmp_path / "serve.yaml"
    good.write_text("host: 0.0.0.0\nmax_sessions: 3\n")
    config = ServeConfig.from_sources(_parse([]), env={}, config_file=good)
    assert (config.host, config.max_sessions) == ("0.0.0.0", 3)
    bad = tmp_path / "bad.yaml"
    bad.write_text("stop_sec: 1\n")
    with pytest.raises(ValueError, match="stop_sec"):
        ServeConfig.from_sources(_parse([]), env={}, config_file=bad)


@pytest.mark.parametrize(
    "field, value",
    [
        ("port", 70000), ("stop_secs", 0.0), ("stop_secs", 9), ("tts", "say"), ("device", "tpu"),
        ("max_new_tokens", 0), ("steps_per_block", 0), ("max_sessions", 0), ("asr", ""),
        ("public_url", "example.com"), ("api_keys", ("",)), ("input_frame_ms", 20),
        ("input_frame_ms", 48), ("asr_pause_secs", 0.3), ("asr_idle_pause_secs", 0.01),
        ("asr_idle_pause_secs", 0.3), ("max_bookings_per_caller", 0),
        ("api_client_concurrency", -1), ("api_client_tokens_per_min", 1.5),
        ("reserved_slots", True),
    ],
)  # fmt: skip
def test_invalid_values_name_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ServeConfig(**{field: value})


def test_bad_env_value_is_a_clear_error():
    with pytest.raises(ValueError, match="DIFFVOICE_PORT"):
        ServeConfig.from_sources(_parse([]), env={"DIFFVOICE_PORT": "eighty"})


def test_every_field_has_a_flag_with_help():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.dest: a for a in parser._actions}
    for name in ServeConfig.__dataclass_fields__:
        assert name in flags and flags[name].help, name
