"""kernels/unmask_confidence.py: Triton vs reference, and reference vs the plain definition."""

import pytest
import torch

from diffvoice.kernels import ops
from diffvoice.kernels.unmask_confidence import unmask_confidence, unmask_confidence_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)


def make_logits(batch, length, vocab, dtype, device=DEVICE):
    """Random logits with some -inf entries and a planted exact tie for the max."""
    logits = torch.randn(batch, length, vocab) * 4  # [B, L, V]
    prev = torch.randn(batch, vocab) * 4  # [B, V]
    logits[0, 1, ::5] = float("-inf")  # e.g. suppressed tokens
    peak = logits[1 % batch, 2].max() + 3
    logits[1 % batch, 2, vocab // 3] = peak  # tie: the first index must win,
    logits[1 % batch, 2, vocab - 2] = peak  # like torch.argmax
    return logits.to(dtype).to(device), prev.to(dtype).to(device)


def pick_rows(batch, length, device=DEVICE):
    n = batch * length
    return torch.randperm(n)[: n // 2 + 1].to(device)  # unsorted masked positions


def check_same(got, want, check_close):
    token, prob, entropy = got
    token_ref, prob_ref, entropy_ref = want
    assert token.dtype == torch.int64 and prob.dtype == torch.float32
    assert torch.equal(token, token_ref)
    check_close(prob, prob_ref)
    check_close(entropy, entropy_ref)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,block_v,num_splits", [
    ((2, 5, 123), None, 1),  # one tile
    ((3, 7, 769), 128, 1),  # several tiles and a ragged tail
    ((2, 6, 769), 128, 3),  # vocabulary split across programs, then merged
])
@pytest.mark.parametrize("shift", [False, True], ids=["noshift", "shift"])
@pytest.mark.parametrize("gather", [False, True], ids=["all", "rows"])
def test_triton_matches_reference(triton_backend, check_close, dtype, shape, block_v, num_splits,
                                  shift, gather):
    batch, length, vocab = shape
    logits, prev = make_logits(batch, length, vocab, dtype)
    rows = pick_rows(batch, length) if gather else None
    args = dict(prev_logits=prev, shift=shift, temperature=0.7, need_entropy=True, rows=rows)
    got = unmask_confidence(logits, num_splits=num_splits, block_v=block_v, **args)
    want = unmask_confidence_ref(logits, **args)
    expected_shape = (rows.numel(),) if gather else (batch, length)
    assert got[0].shape == got[1].shape == got[2].shape == expected_shape
    check_same(got, want, check_close)


def test_triton_strided_logits_without_entropy(triton_backend, check_close):
    # logits as a slice of a bigger buffer (non-contiguous B/L strides, contiguous V)
    big, _ = make_logits(3, 9, 200, torch.float32)
    logits = big[:, 2:8]
    token, prob, entropy = unmask_confidence(logits, temperature=1.0, need_entropy=False)
    token_ref, prob_ref, _ = unmask_confidence_ref(logits.contiguous())
    assert entropy is None
    assert torch.equal(token, token_ref)
    check_close(prob, prob_ref)


def test_triton_strided_rows(triton_backend, check_close):
    # rows as a column of a bigger index table (a view with a stride), as a caller may pass them
    logits, prev = make_logits(3, 6, 200, torch.float32)
    rows = pick_rows(3, 6)
    table = torch.full((rows.numel(), 3), 10**9, dtype=torch.int64, device=rows.device)
    table[:, 1] = rows
    assert not table[:, 1].is_contiguous()
    got = unmask_confidence(logits, prev, shift=True, need_entropy=True, rows=table[:, 1])
    check_same(got, unmask_confidence_ref(logits, prev, shift=True, need_entropy=True, rows=rows),
               check_close)


def test_reference_matches_plain_definition(check_close):
    batch, length, vocab = 3, 6, 301
    logits, prev = make_logits(batch, length, vocab, torch.float32, "cpu")
    temperature = 0.8
    token, prob, entropy = unmask_confidence_ref(logits, prev, shift=True,
                                                 temperature=temperature, need_entropy=True)
    for b in range(batch):
        for i in range(length):
            source = prev[b] if i == 0 else logits[b, i - 1]  # the logit shift, spelled out
            x = source.double() / temperature
            p = torch.softmax(x, dim=-1)  # materialised
            assert token[b, i].item() == int(torch.nonzero(x == x.max())[0])  # first max
            assert abs(prob[b, i].item() - p.max().item()) < 1e-6
            want_h = torch.distributions.Categorical(probs=p).entropy().item()
            assert abs(entropy[b, i].item() - want_h) < 1e-5


def test_reference_rows_gather_and_greedy_temperature(check_close):
    logits, _ = make_logits(2, 5, 123, torch.float32, "cpu")
    rows = pick_rows(2, 5, "cpu")
    full = unmask_confidence_ref(logits, temperature=0.0, need_entropy=True)  # 0 = greedy
    part = unmask_confidence_ref(logits, temperature=1.0, need_entropy=True, rows=rows)
    for got, want in zip(part, full, strict=True):
        check_close(got, want.reshape(-1)[rows])
    # a sharper temperature raises the top probability and lowers the entropy
    sharp = unmask_confidence_ref(logits, temperature=0.5, need_entropy=True)
    assert torch.equal(sharp[0], full[0])
    assert (sharp[1] >= full[1] - 1e-6).all() and (sharp[2] <= full[2] + 1e-5).all()


def test_ops_dispatch_both_backends_agree(triton_backend, check_close):
    logits, prev = make_logits(2, 5, 123, torch.bfloat16)
    a = ops.unmask_confidence(logits, prev, shift=True, need_entropy=True, backend="triton")
    b = ops.unmask_confidence(logits, prev, shift=True, need_entropy=True, backend="torch")
    check_same(a, b, check_close)


@pytest.mark.parametrize("fn", [unmask_confidence, unmask_confidence_ref])
def test_bad_inputs_raise(fn):
    logits, prev = make_logits(2, 5, 123, torch.float32)
    with pytest.raises(ValueError, match="prev_logits"):
        fn(logits, shift=True)
    with pytest.raises(ValueError, match="prev_logits"):
        fn(logits, prev[:, :100], shift=True)
    with pytest.raises(ValueError, match="temperature"):
        fn(logits, temperature=-1.0)
    with pytest.raises(ValueError, match="rows"):
        fn(logits, rows=torch.tensor([0, 1], dtype=torch.int32, device=logits.device))
    with pytest.raises(ValueError, match=r"\[B, L, V\]"):
        fn(logits[0])


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("batch,length", [(1, 16), (32, 32)])
def test_gpu_qwen_vocabulary(check_close, batch, length):
    logits, prev = make_logits(batch, length, 151936, torch.bfloat16, "cuda")
    rows = pick_rows(batch, length, "cuda")
    for r in (None, rows):
        args = dict(prev_logits=prev, shift=True, need_entropy=True, rows=r)
        check_same(unmask_confidence(logits, **args), unmask_confidence_ref(logits, **args),
                   check_close)
