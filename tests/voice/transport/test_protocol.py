"""Sans-I/O tests of the browser wire protocol: no sockets, random inputs."""

from __future__ import annotations

import json
import random
import string

import pytest

from diffvoice.voice.transport import protocol as p


def _rand_text(rng: random.Random, n: int = 12) -> str:
    alphabet = string.ascii_letters + ' ,.?!éü€😀"\\\n'
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(0, n)))


def _random_server_events(rng: random.Random) -> list[p.Event]:
    ts = [1.7e9 + rng.random() * 10 for _ in range(5)]
    return [
        p.SessionStarted(
            session_id=_rand_text(rng),
            input_sample_rate=16000,
            output_sample_rate=rng.choice([16000, 22050, 24000]),
            stop_secs=round(rng.uniform(0.1, 2.0), 3),
            model=_rand_text(rng),
            asr=_rand_text(rng),
            tts="espeak",
            warnings=[_rand_text(rng) for _ in range(rng.randint(0, 3))],
        ),
        p.Transcript(text=_rand_text(rng), final=rng.random() < 0.5),
        p.BotText(text=_rand_text(rng)),
        p.BotStartedSpeaking(),
        p.BotStoppedSpeaking(),
        p.PlaybackFlush(),
        p.Latency(
            turn=rng.randint(1, 99),
            session_id=_rand_text(rng),
            stop_secs=0.5,
            vad_stop_t=ts[0],
            transcript_final_t=ts[1],
            llm_first_text_t=None,
            server_ms=rng.random() * 1000,
            interrupted=rng.random() < 0.5,
            user_text=_rand_text(rng),
        ),
        p.Error(code="bad_json", message=_rand_text(rng)),
        p.Pong(),
    ]


@pytest.mark.parametrize("seed", range(5))
def test_server_events_round_trip(seed):
    rng = random.Random(seed)
    for event in _random_server_events(rng):
        wire = event.encode()
        obj = json.loads(wire)
        assert obj["type"] == event.TYPE
        assert p.decode_server(wire) == event


def test_every_server_event_type_is_covered():
    covered = {e.TYPE for e in _random_server_events(random.Random(0))}
    assert covered == set(p.SERVER_EVENTS)


def test_decode_server_ignores_unknown_fields_and_rejects_missing_ones():
    assert p.decode_server('{"type":"transcript","text":"hi","final":true,"x":1}') == p.Transcript(
        "hi", True
    )
    with pytest.raises(p.ProtocolError) as e:
        p.decode_server('{"type":"transcript","final":true}')
    assert e.value.code == "bad_field"


def test_client_messages_decode():
    assert p.decode_client('{"type":"ping"}') == p.Ping()
    assert p.decode_client(p.Ping().encode()) == p.Ping()
    start = p.decode_client('{"type":"session.start","config":{"stop_secs":0.8,"voice":"x"}}')
    assert start == p.SessionStart(config={"stop_secs": 0.8, "voice": "x"})
    assert p.session_config_warnings(start) == [
        "session.start config key 'voice' is not supported and was ignored"
    ]
    assert p.decode_client('{"type":"session.start"}') == p.SessionStart(config={})
    assert p.decode_client(p.SessionStart({"stop_secs": 1}).encode()).config == {"stop_secs": 1.0}


@pytest.mark.parametrize("seed", range(3))
def test_even_pcm_decodes_to_same_samples(seed):
    rng = random.Random(seed)
    data = bytes(rng.randrange(256) for _ in range(2 * rng.randint(0, 800)))
    audio = p.decode_client(data)
    assert isinstance(audio, p.AudioIn)
    assert audio.pcm == data and audio.num_samples == len(data) // 2
    assert p.decode_client(bytearray(data)).pcm == data


@pytest.mark.parametrize(
    "message, code, close",
    [
        ("{not json", "bad_json", 1007),
        ("", "bad_json", 1007),
        ("[1,2]", "not_an_object", 1007),
        ('"ping"', "not_an_object", 1007),
        ('{"kind":"ping"}', "missing_type", 1007),
        ('{"type":3}', "missing_type", 1007),
        ('{"type":"hello"}', "unknown_type", 1003),
        ('{"type":"transcript","text":"x","final":true}', "unknown_type", 1003),
        ('{"type":"session.start","config":[1]}', "bad_field", 1007),
        ('{"type":"session.start","config":{"stop_secs":"fast"}}', "bad_field", 1007),
        ('{"type":"session.start","config":{"stop_secs":true}}', "bad_field", 1007),
        ('{"type":"session.start","config":{"stop_secs":99}}', "bad_field", 1007),
        ('{"type":"session.start","config":{"stop_secs":NaN}}', "bad_field", 1007),
        (b"\x01\x02\x03", "odd_pcm", 1007),
        (b"\x00" * (p.MAX_AUDIO_FRAME_BYTES + 2), "frame_too_large", 1008),
        ("{" + " " * p.MAX_TEXT_FRAME_CHARS + "}", "frame_too_large", 1008),
    ],
)
def test_malformed_client_messages(message, code, close):
    with pytest.raises(p.ProtocolError) as e:
        p.decode_client(message)
    assert e.value.code == code
    assert e.value.close_code == close
    err = p.decode_server(e.value.to_event().encode())
    assert err == p.Error(code=code, message=e.value.message)


@pytest.mark.parametrize("seed", range(3))
def test_random_bytes_never_escape_as_other_exceptions(seed):
    rng = random.Random(seed)
    for _ in range(200):
        n = rng.randint(0, 40)
        raw = "".join(rng.choice('{}[]":,0123 abtypesion.') for _ in range(n))
        try:
            msg = p.decode_client(raw)
        except p.ProtocolError as e:
            assert e.close_code in (1003, 1007, 1008)
        else:
            assert isinstance(msg, (p.Ping, p.SessionStart))


def test_error_codes_all_map_to_close_codes():
    for code, close in p.ERROR_CLOSE_CODES.items():
        assert p.ProtocolError(code, "x").close_code == close
    with pytest.raises(ValueError):
        p.ProtocolError("no_such_code", "x")


def test_encode_rejects_nan():
    with pytest.raises(ValueError):
        p.Latency(turn=1, session_id="s", stop_secs=float("nan")).encode()
