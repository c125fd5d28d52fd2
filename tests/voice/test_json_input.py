"""Issue 12, problem 5: every way untrusted JSON can fail is one JSONInputError."""

import pytest

from diffvoice.voice.json_input import JSONInputError, loads_untrusted

BAD = {
    "not_json": "{nope",
    "huge_int": "1" * 5000,
    "huge_int_in_object": '{"type": "ping", "n": ' + "9" * 4400 + "}",
    "deep_nesting": "[" * 100_000 + "]" * 100_000,
    "deep_object": '{"a":' * 5000 + "1" + "}" * 5000,
    "lone_high_surrogate": '{"type": "\\ud800"}',
    "lone_low_surrogate": '["x\\uDC00y"]',
    "not_utf8": b'{"a": "\xff"}',
    "empty": "",
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_inputs_raise_one_error_type(name):
    with pytest.raises(JSONInputError):
        loads_untrusted(BAD[name])


def test_good_inputs_decode_as_json_does():
    assert loads_untrusted('{"a": [1, 2.5, null, "\\ud83d\\ude00"]}') == {"a": [1, 2.5, None, "😀"]}
    assert loads_untrusted(b'{"type": "ping"}') == {"type": "ping"}
    assert loads_untrusted("1" * 4300) == int("1" * 4300)
