"""Issue 39, item 5 with `serve --workers N`: a Twilio stream token is single use and the
phone-call cap holds across every worker (voice/scale/phone_calls.py)."""

from __future__ import annotations

import multiprocessing as mp

import pytest

from diffvoice.voice.scale import phone_calls
from diffvoice.voice.scale.phone_calls import SharedPhoneCalls


def _claim_in_child(view, call_sid, out) -> None:
    out.put((view.claim(call_sid), view.acquire()))


def test_a_call_claimed_on_one_worker_is_refused_on_another_process():
    ctx = mp.get_context("fork")  # no re-import of torch in the child
    shared = SharedPhoneCalls(2, ctx)
    first = shared.for_worker(0, limit=1, retention_s=100)
    second = shared.for_worker(1, limit=1, retention_s=100)
    assert first.claim("CA1") and first.acquire()
    out = ctx.Queue()
    child = ctx.Process(target=_claim_in_child, args=(second, "CA1", out))
    child.start()
    assert out.get(timeout=60) == (False, False)  # claimed, and the one phone slot is taken
    child.join(30)
    assert second.open_calls() == 1
    first.release()
    assert second.acquire() and first.open_calls() == 1
    shared.reset(1)  # worker 1 died: its calls are gone, its claims are not
    assert first.open_calls() == 0 and not second.claim("CA1")


def test_claims_expire_and_the_oldest_makes_room(monkeypatch):
    monkeypatch.setattr(phone_calls, "CLAIMS", 3)
    shared = SharedPhoneCalls(1, mp.get_context("fork"))
    view = shared.for_worker(0, limit=None, retention_s=10)
    assert view.claim("CA1", now=0) and view.claim("CA2", now=1) and view.claim("CA3", now=2)
    assert not view.claim("CA2", now=5)
    assert view.claim("CA4", now=5)  # table full: CA1, the oldest, is forgotten
    assert view.claim("CA1", now=6) and not view.claim("CA4", now=6)
    assert view.claim("CA4", now=16)  # past its retention
    assert all(view.acquire() for _ in range(50))  # limit None: no cap
    with pytest.raises(ValueError):
        shared.for_worker(1, limit=1, retention_s=10)
