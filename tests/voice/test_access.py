"""Issue 12, problem 4: who may open /ws (Origin allow-list, keys, short-lived tokens); issue 39
item 7: the allow-list never trusts the Host header."""

from diffvoice.voice.access import (
    SessionTokens,
    allowed_origins,
    origin_allowed,
    server_origins,
    ws_credential_ok,
)
from diffvoice.voice.config import ServeConfig


def test_origin_rules():
    assert origin_allowed(None, ())  # not a browser
    for local in ("http://localhost:3000", "http://127.0.0.1:9", "http://[::1]:8000"):
        assert origin_allowed(local, ())
    assert not origin_allowed("https://evil.example", ())
    assert not origin_allowed("https://voice.example.com.evil.example", ())
    assert not origin_allowed("null", ())
    assert not origin_allowed("file://", ())
    assert origin_allowed("https://app.example", ("https://app.example",))
    assert origin_allowed("https://APP.example/", ("https://app.example",))
    assert origin_allowed("https://evil.example", ("*",))


def test_the_servers_own_origins_come_from_its_config_not_the_host_header():
    config = ServeConfig(host="voice.example.com", port=8443, public_url="https://pub.example")
    origins = allowed_origins(config.replace(allowed_origins=("https://app.example",)))
    assert origins == ("https://app.example", "http://voice.example.com:8443",
                       "https://voice.example.com:8443", "https://pub.example")
    assert origin_allowed("https://voice.example.com:8443", origins)  # the page it serves
    assert not origin_allowed("https://voice.example.com:9999", origins)
    # listening on every interface (or a port picked at start): only the allow-list names pages
    assert server_origins("0.0.0.0", 8000) == () and server_origins("127.0.0.1", 0) == ()
    assert server_origins("::1", 8000) == ("http://[::1]:8000", "https://[::1]:8000")


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


def test_host_rules():
    """Issue 54 N11: the DNS rebinding guard's Host rule (voice.api_guard.HostGuardMiddleware)."""
    from diffvoice.voice.access import allowed_hosts, host_allowed, host_name

    assert host_name("[::1]:8000") == "::1" and host_name("LocalHost.:80") == "localhost"
    assert host_name("box.lan") == "box.lan" and host_name("::1") == "::1"
    assert host_allowed(None, ())  # not a browser
    for own in ("localhost:8000", "127.0.0.1", "[::1]:9", "192.168.1.20:8000", "[fe80::1]"):
        assert host_allowed(own, ()), own
    for foreign in ("rebind.example:8000", "localhost.rebind.example", "127.0.0.1.nip.io", ""):
        assert not host_allowed(foreign, ()), foreign
    assert host_allowed("Box.LAN:8000", ("box.lan",)) and host_allowed("x.example", ("*",))
    config = ServeConfig(host="voice.example.com", public_url="https://pub.example:8443/x",
                         allowed_hosts=("box.lan",))
    assert allowed_hosts(config) == ("box.lan", "voice.example.com", "pub.example")
    assert allowed_hosts(config.replace(host="0.0.0.0", public_url=None)) == ("box.lan",)
