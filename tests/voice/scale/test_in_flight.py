"""voice.scale.ray_serve.CountInFlight: what a replica reports to the hub as `in_flight` (the
requests it is handling, WebSockets included), without a Ray cluster."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, WebSocket
from fastapi.testclient import TestClient

from diffvoice.voice.scale.ray_serve import CountInFlight, InFlight


@pytest.fixture
def counted():
    in_flight = InFlight()
    app = FastAPI()

    @app.get("/now")
    async def now() -> dict:
        return {"in_flight": in_flight.count}

    @app.get("/fails")
    async def fails() -> dict:
        raise RuntimeError("boom")

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        await websocket.accept()
        await websocket.receive_text()
        await websocket.send_json({"in_flight": in_flight.count})
        await websocket.receive_text()  # held open until the client says

    app.add_middleware(CountInFlight, in_flight=in_flight)
    return app, in_flight


def test_requests_count_while_the_app_handles_them(counted):
    app, in_flight = counted
    with TestClient(app, raise_server_exceptions=False) as client:
        assert client.get("/now").json() == {"in_flight": 1}
        assert in_flight.count == 0
        assert client.get("/fails").status_code == 500
        assert in_flight.count == 0  # an app that raised is done too
        with client.websocket_connect("/ws") as ws:
            ws.send_text("how many?")
            assert ws.receive_json() == {"in_flight": 1}
            assert client.get("/now").json() == {"in_flight": 2}  # the call still counts
            ws.send_text("bye")
        assert in_flight.count == 0
