"""Issue 12, problem 4: who may open /ws (Origin allow-list, keys, short-lived tokens)."""

from diffvoice.voice.access import SessionTokens, origin_allowed, ws_credential_ok


def test_origin_rules():
    host = "voice.example.com:8443"
    assert origin_allowed(None, host, ())  # not a browser
    assert origin_allowed("https://voice.example.com:8443", host, ())  # the page's own origin
    for local in ("http://localhost:3000", "http://127.0.0.1:9", "http://[::1]:8000"):
        assert origin_allowed(local, host, ())
    assert not origin_allowed("https://evil.example", host, ())
    assert not origin_allowed("https://voice.example.com.evil.example", host, ())
    assert not origin_allowed("null", host, ())
    assert not origin_allowed("file://", host, ())
    assert origin_allowed("https://app.example", host, ("https://app.example",))
    assert origin_allowed("https://evil.example", host, ("*",))


def test_session_tokens_expire_and_cannot_be_forged():
    tokens = SessionTokens(secret=b"s" * 32, ttl_s=60)
    token, expires = tokens.issue(now=1000.0)
    assert expires == 1060.0
    assert tokens.valid(token, now=1059.0)
    assert not tokens.valid(token, now=1060.0)
    expiry, _, mac = token.partition(".")
    assert not tokens.valid(f"{int(expiry) + 1000}.{mac}", now=1000.0)  # extended expiry
    other = SessionTokens(secret=b"t" * 32, ttl_s=60)
    assert not other.valid(token, now=1000.0)  # another server's secret
    for junk in (None, "", ".", "abc.def", "1" * 300, "12345678901234.aa"):
        assert not tokens.valid(junk, now=0.0)


def test_ws_credentials():
    tokens = SessionTokens()
    token, _ = tokens.issue()
    keys = ("sk-a", "sk-b")
    assert ws_credential_ok({}, {}, (), tokens)  # no keys configured: open
    assert not ws_credential_ok({}, {}, keys, tokens)
    assert ws_credential_ok({"authorization": "Bearer sk-b"}, {}, keys, tokens)
    assert not ws_credential_ok({"authorization": "Bearer sk-c"}, {}, keys, tokens)
    assert ws_credential_ok({}, {"token": token}, keys, tokens)
    assert ws_credential_ok({}, {"api_key": "sk-a"}, keys, tokens)
    assert not ws_credential_ok({}, {"token": "1.2"}, keys, tokens)
