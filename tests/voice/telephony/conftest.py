"""Shared fixtures: a real uvicorn server on loopback, run in its own thread."""

from __future__ import annotations

import os
import threading
import time
from contextlib import contextmanager

import pytest
import uvicorn

TIMEOUT_SCALE = float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))


def scaled(seconds: float) -> float:
    return seconds * TIMEOUT_SCALE


@contextmanager
def serve(app):
    """Run ``app`` on 127.0.0.1:<free port> in a thread; yields ``(http_base, ws_base)``."""
    config = uvicorn.Config(
        app, host="127.0.0.1", port=0, log_level="warning", lifespan="off", ws="websockets-sansio"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + scaled(20)
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(scaled(30))


@pytest.fixture
def live_server():
    return serve
