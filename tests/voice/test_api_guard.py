"""Issue 39, item 7 on the real server (voice.cli_serve.build_app on loopback): web pages of
other sites cannot reach /v1 or /ws. Before the fix a text/plain POST to /v1/chat/completions got
200, any Origin could call /v1 without keys, and /ws trusted `Host: evil.example:PORT` with a
matching Origin (DNS rebinding). Issue 54 N11: without keys, no route (HTTP or /ws) answers a
Host header that does not name the server (DNS rebinding read /healthz, /metrics and
/openapi.json)."""

from __future__ import annotations

import asyncio
import dataclasses
import http.client
import json
import socket
import urllib.error
import urllib.request

import pytest
import websockets
from voice_fixtures import LiveServer, scaled

from diffvoice.voice.api_guard import ApiGuardMiddleware, is_json
from diffvoice.voice.transport import protocol

KEY = "sk-guard-test"


class _AppServer(LiveServer):
    """LiveServer, but serving the full app (build_app: /v1 and Twilio too)."""

    def __init__(self, state) -> None:
        super().__init__(state)
        from diffvoice.voice.cli_serve import build_app

        self.app = build_app(state)
        self.server.config.app = self.app


def _serve(voice_state, **changes):
    config = voice_state.config.replace(**changes)
    return _AppServer(dataclasses.replace(voice_state, config=config, active_sessions=set(),
                                          client_slots=None, session_tokens=None))


@pytest.fixture(scope="module")
def open_server(voice_state):
    with _serve(voice_state, allowed_origins=("https://app.example",),
                allowed_hosts=("voice.lan",)) as server:
        yield server


@pytest.fixture(scope="module")
def keyed_server(voice_state):
    with _serve(voice_state, api_keys=(KEY,)) as server:
        yield server


def _post(server, path: str, body: bytes, headers: dict) -> tuple[int, dict]:
    request = urllib.request.Request(server.url + path, data=body, headers=headers,
                                     method="POST")
    try:
        with urllib.request.urlopen(request, timeout=scaled(30)) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _chat_body(server) -> bytes:
    return json.dumps({"model": server.state.model_name, "max_tokens": 2,
                       "messages": [{"role": "user", "content": "hi"}]}).encode()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_non_json_posts_get_415(open_server, path, content_type):
    headers = {} if content_type is None else {"Content-Type": content_type}
    request = urllib.request.Request(open_server.url + path, data=_chat_body(open_server),
                                     headers=headers, method="POST")
    if content_type is None:  # urllib adds a form type by itself; send none at all
        request.remove_header("Content-type")
        request.unredirected_hdrs.pop("Content-type", None)
    try:
        with urllib.request.urlopen(request, timeout=scaled(30)) as response:
            status, body = response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        status, body = e.code, json.loads(e.read())
    assert status == 415, body
    assert body["error"]["code"] == "unsupported_media_type"
    assert body["error"]["type"] == "invalid_request_error"


def test_json_with_a_charset_is_accepted(open_server):
    status, body = _post(open_server, "/v1/chat/completions", b"{}",
                         {"Content-Type": "application/json; charset=utf-8"})
    assert status == 400 and body["error"]["type"] == "invalid_request_error"  # no model


@pytest.mark.parametrize("origin,allowed", [
    ("https://evil.example", False), ("null", False), ("http://localhost:5173", True),
    ("https://app.example", True), (None, True)])
def test_v1_without_keys_refuses_foreign_origins(open_server, origin, allowed):
    headers = {"Content-Type": "application/json"}
    if origin is not None:
        headers["Origin"] = origin
    status, body = _post(open_server, "/v1/chat/completions", b"{}", headers)
    if allowed:
        assert status == 400, body  # reached the route: the body has no model
    else:
        assert status == 403 and body["error"]["code"] == "origin_not_allowed"


def test_v1_with_keys_is_guarded_by_the_key(keyed_server):
    headers = {"Content-Type": "application/json", "Origin": "https://evil.example"}
    status, body = _post(keyed_server, "/v1/chat/completions", b"{}", headers)
    assert status == 401, body
    status, body = _post(keyed_server, "/v1/chat/completions", b"{}",
                         {**headers, "Authorization": f"Bearer {KEY}"})
    assert status == 400, body  # a server-side client with a key may send any Origin


async def _refused_by_origin(server, host: str, origin: str | None) -> list[str]:
    """Open /ws on the server's loopback port as if `host` resolved to it (DNS rebinding):
    the Host header carries `host`; returns the error codes read until the close."""
    sock = socket.create_connection(("127.0.0.1", server.port))
    headers = {"Origin": origin} if origin else {}
    errors = []
    async with websockets.connect(f"ws://{host}/ws", sock=sock, additional_headers=headers,
                                  ping_interval=None) as ws:
        try:  # a refused socket may already be closed; its error event is still read
            await ws.send(protocol.Ping().encode())
        except websockets.ConnectionClosed:
            pass
        try:
            async with asyncio.timeout(scaled(4)):
                async for message in ws:
                    if isinstance(message, str):
                        event = protocol.decode_server(message)
                        if isinstance(event, protocol.Error):
                            errors.append(event.code)
        except (TimeoutError, websockets.ConnectionClosed):
            pass
    return errors


async def test_ws_does_not_trust_the_host_header(open_server):
    host = f"10.9.8.7:{open_server.port}"  # an address passes the Host check (no rebinding)...
    errors = await _refused_by_origin(open_server, host, f"http://{host}")
    assert errors == ["origin_not_allowed"]  # ...but a matching Origin is not trusted for it


# --- issue 54 N11: the Host allow-list (DNS rebinding), on every route -----------------------


def _get_as(server, path: str, host: str) -> tuple[int, bytes]:
    """GET `path` on the server's loopback port with `Host: host`, as a browser would send
    after DNS rebinding made `host` resolve to it."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=scaled(30))
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("path", ["/healthz", "/metrics", "/openapi.json", "/v1/models",
                                  "/agent", "/"])
def test_a_foreign_host_reads_no_route(open_server, path):
    """Before: /healthz (versions, git revision, request ids), /metrics and /openapi.json
    answered any Host, so a page of another site could read them after DNS rebinding."""
    status, body = _get_as(open_server, path, f"rebind.example:{open_server.port}")
    assert status == 421, body[:200]
    error = json.loads(body)["error"]
    assert error["code"] == "host_not_allowed" and "--allowed-hosts" in error["message"]


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "LOCALHOST.", "[::1]", "10.9.8.7",
                                  "voice.lan"])
def test_own_names_and_addresses_pass_the_host_check(open_server, host):
    status, body = _get_as(open_server, "/healthz", f"{host}:{open_server.port}")
    assert status == 200, body[:200]


def test_with_keys_the_key_is_the_guard_not_the_host(keyed_server):
    status, body = _get_as(keyed_server, "/healthz", "rebind.example")
    assert status == 200 and json.loads(body) == {"status": "ok"}


async def test_ws_refuses_a_foreign_host_before_accepting(open_server):
    sock = socket.create_connection(("127.0.0.1", open_server.port))
    with pytest.raises(websockets.InvalidStatus) as refused:
        async with websockets.connect(f"ws://rebind.example:{open_server.port}/ws", sock=sock):
            pass
    assert refused.value.response.status_code == 403


async def test_ws_from_the_servers_own_page_is_allowed(open_server):
    for host in (f"127.0.0.1:{open_server.port}", f"localhost:{open_server.port}"):
        errors = await _refused_by_origin(open_server, host, f"http://{host}")
        assert "origin_not_allowed" not in errors


def test_content_types():
    assert is_json("application/json") and is_json("Application/JSON; charset=utf-8")
    assert not is_json(None) and not is_json("") and not is_json("text/plain")
    assert not is_json("application/jsonx") and not is_json("application/json-seq")
    guard = ApiGuardMiddleware(None, allowed_origins=())
    get = {"type": "http", "method": "GET", "path": "/v1/models", "headers": []}
    assert guard.refusal(get) is None  # a GET has no body to type
