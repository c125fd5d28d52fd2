"""Issue 39, item 9 on the real app with `diffvoice serve`'s WebSocket protocol
(voice.http_limits.uvicorn_options -> voice.transport.keepalive): a /ws text frame that is not
valid UTF-8 still closes 1007, and the server logs one line for it, without a traceback (before:
uvicorn's ERROR with a full traceback for every such frame)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest
import websockets
from voice_fixtures import UvicornThread, scaled

from diffvoice.voice.http_limits import uvicorn_options


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server(voice_state):
    from diffvoice.voice.server import create_app

    state = dataclasses.replace(voice_state, active_sessions=set(), client_slots=None,
                                session_tokens=None)
    with UvicornThread(create_app(state), **uvicorn_options(state.config)) as live:
        yield live


@pytest.mark.parametrize("first", [True, False], ids=["first_frame", "after_audio"])
async def test_non_utf8_text_frame_closes_1007_with_one_log_line(server, first):
    from diffvoice.voice.http_limits import LOG_REPEATS

    LOG_REPEATS.reset()  # (repeats within a minute are collapsed: each case is a first)
    records = _Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "uvicorn", "")]
    for logger in loggers:
        logger.addHandler(records)
    try:
        async with websockets.connect(f"ws://127.0.0.1:{server.port}/ws",
                                      ping_interval=None) as ws:
            if not first:
                await ws.send(b"\0" * 640)
            try:
                await ws.send(b'{"type": "ping", "x": "\xff\xfe"}', text=True)
                async with asyncio.timeout(scaled(10)):
                    async for _ in ws:
                        pass
            except websockets.ConnectionClosed:
                pass
            assert ws.close_code == 1007
        await asyncio.sleep(0.3)  # the server thread's log lines
    finally:
        for logger in loggers:
            logger.removeHandler(records)
    seen = {id(r): r for r in records.records}.values()  # a record reaches several handlers
    utf8 = [r for r in seen if "UTF-8" in r.getMessage()]
    assert len(utf8) == 1, [r.getMessage() for r in utf8]
    assert all(r.exc_info is None for r in seen), [r.getMessage() for r in seen if r.exc_info]
