"""Issue 39, item 10 on the phone: a call's bookings belong to the caller number from the signed
webhook (the stream token binds it), handed to the pipeline as its `caller`; a withheld number
gives an identity of that call alone. Loopback router, pass-through pipeline."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from test_twilio_credentials import TOKEN, Stream, params_for, passthrough, sid, wait_until

from diffvoice.voice.telephony import signature
from diffvoice.voice.telephony.twilio import ActiveCalls, make_router


@pytest.mark.parametrize(("number", "owner"), [
    ("+15550100", "phone:+15550100"),
    ("+266696687", "call:" + sid(31)),  # Twilio's "ANONYMOUS"
    ("", "call:" + sid(31)),
])
async def test_the_pipeline_books_as_the_signed_caller_number(live_server, tmp_path, number,
                                                              owner):
    seen = []

    def build(state, transport, **kwargs):
        seen.append(kwargs.get("caller"))
        return passthrough(state, transport, **kwargs)

    config = SimpleNamespace(public_url=None, twilio_auth_token=TOKEN, twilio_validate=True,
                             latency_log=str(tmp_path / "log.jsonl"), max_sessions=4,
                             twilio_claims_db=str(tmp_path / "claims.sqlite3"))  # one per case
    calls = ActiveCalls()
    app = FastAPI()
    app.include_router(make_router(SimpleNamespace(config=config), calls=calls,
                                   build_pipeline=build))
    token = signature.stream_token(TOKEN, sid(31), caller=number)
    with live_server(app) as (_http, ws_base):
        async with Stream(ws_base, sid(31), params_for(sid(31), token, number)):
            await wait_until(lambda: len(calls) == 1, "the call to start")
    assert seen == [owner]
