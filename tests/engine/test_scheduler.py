"""The pure-Python scheduler with fake pass results: admission, slots, block completion, EOS,
length and rejection beyond the cap."""

from types import SimpleNamespace

import pytest

from diffvoice.engine.params import SamplingParams
from diffvoice.engine.scheduler import EngineOverloaded, Scheduler
from diffvoice.engine.sequence import Sequence, Status

MASK, EOS = 99, 7


def seq(rid, prompt_len=6, **kw):
    return Sequence(rid, list(range(prompt_len)), SamplingParams(**kw), model_block=4,
                    decode_block=4, shift=0, prefix_cache=True)


def fake_pass(rows, fill):
    """Every masked slot of each row's decode block becomes fill(seq, position)."""
    starts, tokens, remaining = [], [], []
    for s in rows:
        starts.append(s.q_start)
        tokens.append([fill(s, p) if s.d_start <= p < s.d_end else 1
                       for p in range(s.q_start, s.q_end)])
        remaining.append(0)
    return SimpleNamespace(window_start=starts, tokens=tokens, remaining=remaining)


def test_block_geometry_and_length_finish():
    sch = Scheduler(max_running=2, max_queued=0, eos_ids=(EOS,))
    s = seq("a", prompt_len=6, max_new_tokens=7)
    sch.add(s)
    rows, admitted = sch.schedule()
    assert admitted == [s] and s.slot == 0
    # prompt 6 tokens, block 4: first decode block is the partial [6, 8), cache writes [0, 4)
    assert (s.q_start, s.d_start, s.d_end, s.writes) == (4, 6, 8, True)
    events = sch.update(rows, fake_pass(rows, lambda s, p: 10 + p))
    assert events[0].token_ids == [16, 17] and not events[0].finished
    assert s.cache_len == 4 and (s.q_start, s.d_start, s.d_end) == (8, 8, 12)
    events = sch.update(rows, fake_pass(rows, lambda s, p: 10 + p))
    assert events[0].token_ids == [18, 19, 20, 21]
    events = sch.update(rows, fake_pass(rows, lambda s, p: 10 + p))
    assert events[0].token_ids == [22] and events[0].finish_reason == "length"  # 7 = 2 + 4 + 1
    assert s.status is Status.FINISHED and not sch.running and sorted(sch.free_slots) == [0, 1]


def test_eos_cuts_and_finishes():
    sch = Scheduler(2, 0, (EOS,))
    s = seq("a", prompt_len=4, max_new_tokens=30)
    sch.add(s)
    rows, _ = sch.schedule()
    ev = sch.update(rows, fake_pass(rows, lambda s, p: EOS if p == 6 else 50))
    assert ev[0].token_ids == [50, 50] and ev[0].finish_reason == "stop"
    assert s.generated == [50, 50]


def test_remaining_masks_keep_block_open_and_count_steps():
    sch = Scheduler(1, 0, (EOS,))
    s = seq("a", prompt_len=8, max_new_tokens=8, steps_per_block=3)
    sch.add(s)
    rows, _ = sch.schedule()
    out = fake_pass(rows, lambda s, p: 5)
    out.remaining = [2]
    assert sch.update(rows, out) == [] and s.steps_in_block == 1 and s.steps_left == 2


def test_cap_waiting_queue_and_abort():
    sch = Scheduler(max_running=1, max_queued=1, eos_ids=(EOS,))
    a, b = seq("a"), seq("b")
    sch.add(a)
    sch.add(b)
    with pytest.raises(EngineOverloaded, match="max_running=1, max_queued=1"):
        sch.add(seq("c"))
    rows, _ = sch.schedule()
    assert rows == [a] and b.status is Status.WAITING
    sch.abort("a")
    assert a.finish_reason == "abort"
    rows, admitted = sch.schedule()
    assert rows == [b] and admitted == [b]
    sch.abort("b")
    assert not sch.by_id and not sch.running


def test_duplicate_request_id_rejected():
    sch = Scheduler(2, 2, (EOS,))
    sch.add(seq("x"))
    with pytest.raises(ValueError, match="already in use"):
        sch.add(seq("x"))
