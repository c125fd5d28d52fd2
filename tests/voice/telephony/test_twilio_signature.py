"""X-Twilio-Signature: the production check against this file's own reading of Twilio's docs.

Twilio's documented algorithm: take the full URL Twilio requested, append every POST parameter
sorted by name (name then value, no separators), HMAC-SHA1 it with the auth token, base64 it.
``reference_signature`` below is written from that description alone and shares no code with
voice.telephony.signature.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import random
import string

import pytest

from diffvoice.voice.telephony import signature


def reference_signature(auth_token: str, url: str, params: dict[str, str]) -> str:
    data = url
    for name in sorted(params):
        data += name + params[name]
    mac = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1)
    return base64.b64encode(mac.digest()).decode()


def random_text(rng: random.Random, n: int) -> str:
    alphabet = string.ascii_letters + string.digits + "+-_ &=?é€"
    return "".join(rng.choice(alphabet) for _ in range(n))


def random_request(rng: random.Random) -> tuple[str, str, dict[str, str]]:
    token = random_text(rng, 32)
    url = f"https://{random_text(rng, 6).lower()}.example.com/telephony/twilio/voice"
    if rng.random() < 0.5:
        url += f"?a={rng.randint(0, 99)}&b=x"
    params = {random_text(rng, rng.randint(1, 12)): random_text(rng, rng.randint(0, 20))
              for _ in range(rng.randint(0, 12))}  # fmt: skip
    params["CallSid"] = "CA" + "".join(rng.choice("0123456789abcdef") for _ in range(32))
    return token, url, params


@pytest.mark.parametrize("seed", range(25))
def test_matches_reference_on_random_requests(seed):
    rng = random.Random(seed)
    token, url, params = random_request(rng)
    expected = reference_signature(token, url, params)
    assert signature.twilio_signature(token, url, params) == expected
    # Order of the pairs as received must not matter.
    shuffled = list(params.items())
    rng.shuffle(shuffled)
    assert signature.signature_matches(token, url, shuffled, expected)


@pytest.mark.parametrize("seed", range(10))
def test_every_tampering_is_rejected(seed):
    rng = random.Random(1000 + seed)
    token, url, params = random_request(rng)
    good = reference_signature(token, url, params)
    tampered = dict(params, CallSid=params["CallSid"][:-1] + "0")
    if tampered == params:
        tampered["CallSid"] += "1"
    assert not signature.signature_matches(token, url, tampered, good)
    assert not signature.signature_matches(token + "x", url, params, good)
    assert not signature.signature_matches(token, url.replace("https://", "http://"), params, good)
    assert not signature.signature_matches(token, url + "/", params, good)
    assert not signature.signature_matches(token, url, params, None)
    assert not signature.signature_matches(token, url, params, "")
    assert not signature.signature_matches("", url, params, good)


def test_default_port_written_either_way_is_accepted():
    params = {"CallSid": "CA1", "From": "+15550100"}
    with_port = reference_signature("tok", "https://h.example:443/v", params)
    without_port = reference_signature("tok", "https://h.example/v", params)
    assert signature.signature_matches("tok", "https://h.example/v", params, with_port)
    assert signature.signature_matches("tok", "https://h.example:443/v", params, without_port)
    other_port = reference_signature("tok", "https://h.example:8443/v", params)
    assert not signature.signature_matches("tok", "https://h.example/v", params, other_port)


def test_stream_token_binds_call_and_secret():
    token = signature.stream_token("secret", "CA123")
    assert signature.stream_token_matches("secret", "CA123", token)
    assert not signature.stream_token_matches("secret", "CA124", token)
    assert not signature.stream_token_matches("other", "CA123", token)
    assert not signature.stream_token_matches("secret", "CA123", None)
    # Never equal to a webhook signature over the same material.
    assert token != signature.twilio_signature("secret", "CA123", {})
