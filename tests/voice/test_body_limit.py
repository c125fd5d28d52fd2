"""Issue 12, problems 2 and 6: request bodies over the limit get 413 before they are read whole
(Content-Length checked up front; a chunked body is cut off as soon as it passes the limit)."""

import asyncio

import pytest
from fastapi import FastAPI, Request
from voice_fixtures import UvicornThread

from diffvoice.voice.body_limit import BodyLimitMiddleware

LIMIT = 1000


@pytest.fixture(scope="module")
def server():
    app = FastAPI()
    app.add_middleware(BodyLimitMiddleware, max_bytes=LIMIT, path_limits={"/small": 100})
    seen = []

    @app.post("/echo")
    @app.post("/small")
    async def echo(request: Request):
        body = await request.body()
        seen.append(len(body))
        return {"n": len(body)}

    with UvicornThread(app, lifespan="off") as running:
        yield running.port, seen


async def _raw(port: int, head: bytes, body_parts=(), read_first=False) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    answer = b""
    if read_first:  # the server answers before the body was sent at all
        answer = await asyncio.wait_for(reader.read(4096), 5)
    else:
        for part in body_parts:
            writer.write(part)
            await writer.drain()
        answer = await asyncio.wait_for(reader.read(4096), 5)
    writer.close()
    return answer


async def test_within_limit_passes(server):
    port, _ = server
    body = b"x" * LIMIT
    head = f"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    answer = await _raw(port, head, [body])
    assert answer.startswith(b"HTTP/1.1 200") and b'{"n":1000}' in answer


async def test_declared_length_over_limit_refused_before_the_body(server):
    port, seen = server
    before = list(seen)
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10000000\r\n\r\n"
    answer = await _raw(port, head, read_first=True)  # no body byte sent
    assert answer.startswith(b"HTTP/1.1 413") and b"request_too_large" in answer
    assert seen == before  # the handler never ran


async def test_chunked_body_cut_off_at_the_limit(server):
    port, seen = server
    before = list(seen)
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
    chunk = b"x" * 600
    parts = [b"%x\r\n%s\r\n" % (len(chunk), chunk)] * 3 + [b"0\r\n\r\n"]
    try:
        answer = await _raw(port, head, parts)
    except ConnectionResetError:
        # the server answered 413 and closed while the client was still sending; the reset can
        # overtake the answer. Refused either way; what matters is the handler saw nothing.
        answer = b"HTTP/1.1 413 (connection reset)"
    assert answer.startswith(b"HTTP/1.1 413")
    assert seen == before


async def test_path_limits_and_bad_length(server):
    port, _ = server
    head = b"POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 101\r\n\r\n"
    assert (await _raw(port, head, read_first=True)).startswith(b"HTTP/1.1 413")
    head = b"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 12abc\r\n\r\n"
    answer = await _raw(port, head, read_first=True)
    assert answer.startswith(b"HTTP/1.1 400")
