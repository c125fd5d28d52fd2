"""kernels/block_attention.py: Triton vs reference, and reference vs a per-query loop."""

import math

import pytest
import torch

from diffvoice.kernels import ops
from diffvoice.kernels.block_attention import block_attention, block_attention_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)


def make_inputs(batch, hq, hkv, length, dim, cap, dtype, device=DEVICE, seq_major_q=False):
    """Random block-attention inputs covering the corner cases.

    Row 0 has a full cache, row 1 an empty cache and only one valid new token (other queries
    in that row see nothing at all under block-causal masking), later rows a partial cache and
    trailing padding.
    """
    if seq_major_q:  # q as the transposed view the model produces: [B, L, Hq, D] -> [B, Hq, L, D]
        q = torch.randn(batch, length, hq, dim).transpose(1, 2)
    else:
        q = torch.randn(batch, hq, length, dim)
    k_new = torch.randn(batch, hkv, length, dim)
    v_new = torch.randn(batch, hkv, length, dim)
    k_cache = torch.randn(batch, hkv, cap, dim)
    v_cache = torch.randn(batch, hkv, cap, dim)
    cache_lens = torch.randint(1, cap + 1, (batch,))
    cache_lens[0] = cap
    new_valid = torch.ones(batch, length, dtype=torch.bool)
    if batch > 1:
        cache_lens[1] = 0
        new_valid[1] = False
        new_valid[1, length - 1] = True
    if batch > 2:
        new_valid[2, length - 2:] = False
    positions = cache_lens[:, None] + torch.arange(length)[None, :]  # [B, L] absolute
    tensors = [t.to(dtype) for t in (q, k_new, v_new, k_cache, v_cache)]
    return [t.to(device) for t in (*tensors, cache_lens, positions, new_valid)]


def run_all(inputs, block_size, **kwargs):
    return block_attention(*inputs, block_size, **kwargs)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [
    (2, 4, 2, 5, 16, 11),  # B, Hq, Hkv, L, D, T  (GQA group 2)
    (3, 6, 2, 7, 32, 11),  # group 3, rows per kv head not a power of two
    (3, 2, 2, 6, 16, 40),  # plain MHA, cache longer than one tile
    (1, 8, 1, 17, 16, 11),  # 136 (group, query) rows: several row tiles per kv head
])
@pytest.mark.parametrize("block_size", [0, 4], ids=["bidir", "blockcausal4"])
@pytest.mark.parametrize("num_splits", [1, 2], ids=["split1", "split2"])
def test_triton_matches_reference(triton_backend, check_lowp, dtype, shape, block_size,
                                  num_splits):
    inputs = make_inputs(*shape, dtype)
    out = run_all(inputs, block_size, num_splits=num_splits)
    ref32 = block_attention_ref(*[t.float() if t.is_floating_point() else t for t in inputs],
                                block_size)
    ref_lowp = block_attention_ref(*inputs, block_size, upcast=False)
    assert out.shape == inputs[0].shape and out.dtype == dtype
    check_lowp(out, ref32, ref_lowp, dtype)
    if shape[0] > 1 and block_size:  # row 1: queries in blocks before the one valid key
        blocks = inputs[6][1] // block_size  # see nothing at all
        blind = blocks < blocks[-1]
        assert blind.any() and (out[1][:, blind] == 0).all()


def test_triton_strided_q_and_scale(triton_backend, check_lowp):
    inputs = make_inputs(2, 4, 2, 5, 16, 11, torch.float32, seq_major_q=True)
    out = run_all(inputs, 3, scale=0.3)
    ref = block_attention_ref(*inputs, 3, scale=0.3)
    check_lowp(out, ref, ref, torch.float32)


@pytest.mark.parametrize("num_splits", [1, 2], ids=["split1", "split2"])
def test_slot_pool_reads_as_the_gathered_cache(triton_backend, num_splits):
    """With `slots`, row b reads slot slots[b] of a pool with more slots than rows (in any
    order, a slot's tail beyond T unread): the same output as the gathered copies, on both
    paths."""
    inputs = make_inputs(3, 4, 2, 5, 16, 11, torch.float32)
    q, k_new, v_new, k_cache, v_cache, lens, pos, valid = inputs
    slots = torch.tensor([4, 0, 2], device=DEVICE)
    k_pool = torch.randn(6, 2, 20, 16, device=DEVICE)  # other slots: noise that must stay unread
    v_pool = torch.randn(6, 2, 20, 16, device=DEVICE)
    k_pool[slots, :, :11], v_pool[slots, :, :11] = k_cache, v_cache
    want = block_attention_ref(*inputs, 4)
    for fn, kw in ((block_attention, {"num_splits": num_splits}), (block_attention_ref, {})):
        got = fn(q, k_new, v_new, k_pool[:, :, :11], v_pool[:, :, :11], lens, pos, valid, 4,
                 slots=slots, **kw)
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="slots"):
        block_attention(q, k_new, v_new, k_pool, v_pool, lens, pos, valid, 4,
                        slots=slots.float())


def test_reference_matches_per_query_loop():
    batch, hq, hkv, length, dim, cap, block_size = 3, 4, 2, 6, 8, 9, 4
    inputs = make_inputs(batch, hq, hkv, length, dim, cap, torch.float32, "cpu")
    q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid = inputs
    out = block_attention_ref(*inputs, block_size)
    group = hq // hkv
    for b in range(batch):
        for h in range(hq):
            kv = h // group
            for i in range(length):
                keys, values = [], []
                for t in range(int(cache_lens[b])):
                    keys.append(k_cache[b, kv, t])
                    values.append(v_cache[b, kv, t])
                for j in range(length):
                    same_or_earlier = positions[b, j] // block_size <= positions[b, i] // block_size
                    if new_valid[b, j] and same_or_earlier:
                        keys.append(k_new[b, kv, j])
                        values.append(v_new[b, kv, j])
                if not keys:
                    assert (out[b, h, i] == 0).all()
                    continue
                scores = torch.stack(keys).double() @ q[b, h, i].double() / math.sqrt(dim)
                want = torch.softmax(scores, 0) @ torch.stack(values).double()
                torch.testing.assert_close(out[b, h, i].double(), want, atol=1e-5, rtol=1e-5)


def test_reference_bidirectional_sees_every_valid_new_key():
    inputs = make_inputs(2, 2, 1, 5, 8, 7, torch.float32, "cpu")
    q, k_new, v_new, k_cache, v_cache, cache_lens, positions, new_valid = inputs
    # with no cache and identical scores, bidirectional attention averages all valid new values
    zeros = torch.zeros_like(cache_lens)
    flat_q = torch.zeros_like(q)
    out = block_attention_ref(flat_q, k_new, v_new, k_cache, v_cache, zeros, positions,
                              new_valid, 0)
    for b in range(2):
        mean_v = v_new[b, 0][new_valid[b]].mean(0)
        torch.testing.assert_close(out[b, :, 0], mean_v.expand(2, -1))


def test_ops_dispatch_both_backends_agree(triton_backend, check_lowp):
    inputs = make_inputs(2, 4, 2, 5, 16, 11, torch.bfloat16)
    a = ops.block_attention(*inputs, 4, backend="triton")
    b = ops.block_attention(*inputs, 4, backend="torch")
    ref32 = block_attention_ref(*[t.float() if t.is_floating_point() else t for t in inputs], 4)
    check_lowp(a, ref32, b, torch.bfloat16)


@pytest.mark.parametrize("fn", [block_attention, block_attention_ref])
def test_bad_inputs_raise(fn):
    q, k_new, v_new, k_cache, v_cache, lens, pos, valid = make_inputs(2, 3, 2, 5, 16, 11,
                                                                      torch.float32)
    with pytest.raises(ValueError, match="multiple"):
        fn(q, k_new, v_new, k_cache, v_cache, lens, pos, valid, 0)
    q = q[:, :2]
    with pytest.raises(ValueError, match="new_valid"):
        fn(q, k_new, v_new, k_cache, v_cache, lens, pos, valid.int(), 0)
    with pytest.raises(ValueError, match="block_size"):
        fn(q, k_new, v_new, k_cache, v_cache, lens, pos, valid, -1)
    with pytest.raises(ValueError, match="k_cache"):
        fn(q, k_new, v_new, k_cache[..., :8], v_cache[..., :8], lens, pos, valid, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("batch,length,prefix", [(1, 16, 2048), (32, 32, 512)])
def test_gpu_qwen_shapes(check_lowp, batch, length, prefix):
    inputs = make_inputs(batch, 12, 2, length, 128, prefix, torch.bfloat16, "cuda")
    for block_size in (0, length):
        out = run_all(inputs, block_size)
        ref32 = block_attention_ref(*[t.float() if t.is_floating_point() else t
                                      for t in inputs], block_size)
        ref_lowp = block_attention_ref(*inputs, block_size, upcast=False)
        check_lowp(out, ref32, ref_lowp, torch.bfloat16)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_strided_index_tensors(triton_backend, check_lowp, dtype):
    """cache_lens, positions and new_valid as the engine passes them: columns of its per-pass
    tables (views with a stride, not copies). Read with a unit stride, rows after the first take
    another row's or an unrelated table entry as their cache length: wrong outputs under the
    interpreter, out-of-bounds cache reads on a GPU (seen on an H200 before this was fixed)."""
    batch, length, cap = 3, 5, 11
    inputs = make_inputs(batch, 4, 2, length, 16, cap, dtype)
    lens, pos, valid = inputs[5:]
    table = torch.full((batch, 7), 10**6, dtype=lens.dtype, device=lens.device)
    table[:, 3] = lens
    pos_table = torch.full((batch, 2 * length), 10**6, dtype=pos.dtype, device=pos.device)
    pos_table[:, ::2] = pos
    valid_table = torch.zeros(batch, length, 3, dtype=torch.bool, device=valid.device)
    valid_table[:, :, 1] = valid
    strided = [*inputs[:5], table[:, 3], pos_table[:, ::2], valid_table[:, :, 1]]
    assert not any(t.is_contiguous() for t in strided[5:])
    out = run_all(strided, 4)
    ref32 = block_attention_ref(*[t.float() if t.is_floating_point() else t for t in inputs], 4)
    check_lowp(out, ref32, block_attention_ref(*inputs, 4, upcast=False), dtype)
