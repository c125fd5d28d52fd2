"""kernels/rotary.py: Triton vs reference, and reference vs rotation as complex multiplication."""

import pytest
import torch

from diffvoice.kernels import ops
from diffvoice.kernels.rotary import rotary, rotary_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)


def rope_tables(num_positions, dim, base=10000.0, device=DEVICE):
    """HF-style cos/sin tables [P, D]: angles p * base^(-2j/D), duplicated over the halves."""
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float32) / dim)  # [D/2]
    angles = torch.arange(num_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)  # [P, D]
    return angles.cos().to(device), angles.sin().to(device)


def make_qk(batch, hq, hk, length, dim, dtype, device=DEVICE):
    q = torch.randn(batch, length, hq, dim).to(dtype).to(device).transpose(1, 2)  # strided view
    k = torch.randn(batch, hk, length, dim).to(dtype).to(device)
    return q, k


def upcast(*tensors):
    return [t.float() for t in tensors]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(2, 4, 2, 5, 16), (3, 6, 2, 7, 32)], ids=str)
@pytest.mark.parametrize("indexed", [False, True], ids=["per_token", "table"])
def test_triton_matches_reference(triton_backend, check_lowp, dtype, shape, indexed):
    batch, hq, hk, length, dim = shape
    q, k = make_qk(batch, hq, hk, length, dim, dtype)
    cos, sin = rope_tables(64, dim)
    positions = torch.randint(0, 64, (batch, length), device=DEVICE)
    if not indexed:
        cos, sin, positions = cos[positions], sin[positions], None  # [B, L, D]
    q_out, k_out = rotary(q, k, cos, sin, positions)
    q_ref, k_ref = rotary_ref(q, k, cos, sin, positions)
    q_ref32, k_ref32 = rotary_ref(*upcast(q, k), cos, sin, positions)
    assert q_out.shape == q.shape and k_out.dtype == dtype
    check_lowp(q_out, q_ref32, q_ref, dtype)
    check_lowp(k_out, k_ref32, k_ref, dtype)


def test_reference_matches_complex_rotation():
    batch, heads, length, dim = 2, 3, 5, 8
    q, k = make_qk(batch, heads, heads, length, dim, torch.float32, "cpu")
    cos, sin = rope_tables(32, dim, device="cpu")
    positions = torch.randint(0, 32, (batch, length))
    q_out, _ = rotary_ref(q, k, cos, sin, positions)
    half = dim // 2
    # pair (x[j], x[j + D/2]) is the complex number x[j] + i x[j + D/2], rotated by angle[p, j]
    z = torch.complex(q[..., :half].double(), q[..., half:].double())
    inv_freq = 10000.0 ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = positions.double()[:, None, :, None] * inv_freq  # [B, 1, L, D/2]
    rotated = z * torch.polar(torch.ones_like(angle), angle)
    want = torch.cat([rotated.real, rotated.imag], dim=-1)
    torch.testing.assert_close(q_out.double(), want, atol=1e-5, rtol=1e-5)


def test_ops_dispatch_both_backends_agree(triton_backend, check_lowp):
    q, k = make_qk(2, 4, 2, 5, 16, torch.bfloat16)
    cos, sin = rope_tables(16, 16)
    positions = torch.randint(0, 16, (2, 5), device=DEVICE)
    a = ops.rotary(q, k, cos, sin, positions, backend="triton")
    b = ops.rotary(q, k, cos, sin, positions, backend="torch")
    ref32 = rotary_ref(*upcast(q, k), cos, sin, positions)
    for got, low, ref in zip(a, b, ref32, strict=True):
        check_lowp(got, ref, low, torch.bfloat16)


@pytest.mark.parametrize("fn", [rotary, rotary_ref])
def test_bad_inputs_raise(fn):
    q, k = make_qk(2, 4, 2, 5, 16, torch.float32)
    cos, sin = rope_tables(16, 16)
    with pytest.raises(ValueError, match="even"):
        fn(q[..., :15], k[..., :15], cos[:, :15], sin[:, :15],
           torch.zeros(2, 5, dtype=torch.int64, device=q.device))
    with pytest.raises(ValueError, match=r"\[B, L, D\]"):
        fn(q, k, cos, sin)  # tables without positions
    with pytest.raises(ValueError, match="k must be"):
        fn(q, k[:, :, :3], cos[:5].expand(2, 5, 16), sin[:5].expand(2, 5, 16))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_qwen_heads(check_lowp):
    q, k = make_qk(32, 12, 2, 32, 128, torch.bfloat16, "cuda")
    cos, sin = rope_tables(4096, 128, base=1e6, device="cuda")
    positions = torch.randint(0, 4096, (32, 32), device="cuda")
    outs = rotary(q, k, cos, sin, positions)
    lows = rotary_ref(q, k, cos, sin, positions)
    refs = rotary_ref(*upcast(q, k), cos, sin, positions)
    for got, low, ref in zip(outs, lows, refs, strict=True):
        check_lowp(got, ref, low, torch.bfloat16)


@pytest.mark.parametrize("fn", [rotary, rotary_ref], ids=["triton", "reference"])
def test_q_and_k_stacked_rotate_in_one_call(triton_backend, fn):
    """k=None rotates q alone: q and k stacked on the head axis (the model's one launch) give
    what rotating them apart gives."""
    q, k = make_qk(2, 4, 2, 5, 16, torch.float32)
    cos, sin = rope_tables(64, 16)
    positions = torch.randint(0, 64, (2, 5), device=DEVICE)
    q_out, k_out = fn(q, k, cos, sin, positions)
    both, none = fn(torch.cat((q, k), 1), None, cos, sin, positions)
    assert none is None and both.shape == (2, 6, 5, 16)
    torch.testing.assert_close(both[:, :4], q_out)
    torch.testing.assert_close(both[:, 4:], k_out)
