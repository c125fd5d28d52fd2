"""Drafts are low priority in the pure-Python scheduler (fake pass results): real requests are
admitted first, a pass with real rows carries no draft rows, a running draft is shed when a real
request needs its slot, the cap refuses one draft too many, and a promoted draft runs as real."""

from types import SimpleNamespace

import pytest

from diffvoice.engine.params import SamplingParams
from diffvoice.engine.scheduler import DraftRefused, Scheduler
from diffvoice.engine.sequence import Sequence, Status

EOS = 7


def seq(rid, draft=False, prompt_len=4, **kw):
    s = Sequence(rid, list(range(prompt_len)), SamplingParams(max_new_tokens=12, **kw),
                 model_block=4, decode_block=4, shift=0, prefix_cache=True)
    s.draft = draft
    return s


def fake_pass(rows):
    """Every row's decode block is filled with non-EOS tokens and committed."""
    return SimpleNamespace(window_start=[s.q_start for s in rows],
                           tokens=[[50] * (s.q_end - s.q_start) for s in rows],
                           remaining=[0] * len(rows))


def run_pass(sch):
    rows, admitted = sch.schedule()
    events = sch.update(rows, fake_pass(rows)) if rows else []
    return rows, admitted, events


def test_real_request_admitted_before_an_earlier_draft():
    sch = Scheduler(max_running=1, max_queued=4, eos_ids=(EOS,))
    d, r = seq("draft", draft=True), seq("real")
    sch.add(d)
    sch.add(r)
    rows, admitted, _ = run_pass(sch)
    assert admitted == [r] and rows == [r] and d.status is Status.WAITING


def test_drafts_pause_while_real_rows_decode_and_resume_after():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,))
    d = seq("draft", draft=True)
    sch.add(d)
    rows, _, _ = run_pass(sch)
    assert rows == [d] and d.passes == 1
    r = seq("real")
    sch.add(r)
    real_passes = 0
    while r.status is not Status.FINISHED:
        rows, _, _ = run_pass(sch)
        assert rows == [r], "a pass with a real row must not carry the draft"
        real_passes += 1
    assert real_passes == 3 and d.passes == 1 and d.status is Status.RUNNING
    rows, _, _ = run_pass(sch)
    assert rows == [d] and d.passes == 2


def test_drafts_share_passes_when_configured():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,), drafts_share_passes=True)
    d, r = seq("draft", draft=True), seq("real")
    sch.add(d)
    sch.add(r)
    rows, _, _ = run_pass(sch)
    assert sorted(s.request_id for s in rows) == ["draft", "real"]


def test_running_draft_is_shed_for_a_waiting_real_request():
    sch = Scheduler(max_running=2, max_queued=4, eos_ids=(EOS,))
    old, new = seq("d-old", draft=True), seq("d-new", draft=True)
    sch.add(old)
    sch.add(new)
    run_pass(sch)
    assert len(sch.running) == 2
    r = seq("real")
    sch.add(r)
    rows, admitted, _ = run_pass(sch)
    assert sch.shed == [new] and new.finish_reason == "shed" and new.status is Status.FINISHED
    assert admitted == [r] and rows == [r] and old.status is Status.RUNNING
    assert "d-new" not in sch.by_id and sch.shed_total == 1


def test_draft_cap_refuses_one_too_many_and_real_requests_are_not_capped():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,), max_drafts=1)
    sch.add(seq("d1", draft=True))
    with pytest.raises(DraftRefused, match="max_drafts=1"):
        sch.add(seq("d2", draft=True))
    sch.add(seq("r1"))
    sch.add(seq("r2"))
    assert sch.drafts_in_flight() == 1
    sch.abort("d1")
    sch.add(seq("d3", draft=True))
    assert sch.drafts_in_flight() == 1


def test_promoted_draft_runs_as_a_real_request():
    sch = Scheduler(max_running=4, max_queued=4, eos_ids=(EOS,))
    d, r = seq("draft", draft=True), seq("real")
    sch.add(d)
    sch.add(r)
    rows, _, _ = run_pass(sch)
    assert rows == [r]
    assert sch.promote("draft") and not sch.promote("missing")
    rows, _, _ = run_pass(sch)
    assert sorted(s.request_id for s in rows) == ["draft", "real"] and not sch.drafts_in_flight()
