"""kernels/rmsnorm.py: Triton vs reference, and reference vs the plain formula."""

import pytest
import torch

from diffvoice.kernels import ops
from diffvoice.kernels.rmsnorm import rmsnorm, rmsnorm_ref

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)


def make_inputs(shape, dtype, device=DEVICE):
    x = (torch.randn(shape) * 3).to(dtype).to(device)
    residual = torch.randn(shape).to(dtype).to(device)
    weight = (1 + 0.2 * torch.randn(shape[-1])).to(dtype).to(device)
    return x, residual, weight


def upcast(*tensors):
    return [t.float() if t is not None else None for t in tensors]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(5, 123), (2, 3, 769)], ids=str)
@pytest.mark.parametrize("with_residual", [False, True], ids=["plain", "residual"])
def test_triton_matches_reference(triton_backend, check_lowp, dtype, shape, with_residual):
    x, residual, weight = make_inputs(shape, dtype)
    residual = residual if with_residual else None
    normed, new_res = rmsnorm(x, weight, residual, eps=1e-6)
    ref_normed, ref_res = rmsnorm_ref(x, weight, residual, eps=1e-6)  # same low precision
    ref32_normed, ref32_res = rmsnorm_ref(*upcast(x, weight, residual), eps=1e-6)
    assert normed.shape == x.shape and normed.dtype == dtype
    check_lowp(normed, ref32_normed, ref_normed, dtype)
    if with_residual:
        check_lowp(new_res, ref32_res, ref_res, dtype)
    else:
        assert new_res is None and ref_res is None


def test_reference_matches_plain_formula():
    x, residual, weight = make_inputs((4, 7, 96), torch.float32, "cpu")
    normed, new_res = rmsnorm_ref(x, weight, residual, eps=1e-5)
    h = (x + residual).double()
    want = h / torch.sqrt((h * h).mean(-1, keepdim=True) + 1e-5) * weight.double()
    torch.testing.assert_close(new_res, x + residual)
    torch.testing.assert_close(normed.double(), want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(normed, torch.nn.functional.rms_norm(x + residual, (96,), weight,
                                                                    eps=1e-5))


def test_ops_dispatch_both_backends_agree(triton_backend, check_lowp):
    x, residual, weight = make_inputs((3, 123), torch.bfloat16)
    a, a_res = ops.rmsnorm(x, weight, residual, backend="triton")
    b, b_res = ops.rmsnorm(x, weight, residual, backend="torch")
    ref32, ref32_res = rmsnorm_ref(*upcast(x, weight, residual))
    check_lowp(a, ref32, b, torch.bfloat16)
    check_lowp(a_res, ref32_res, b_res, torch.bfloat16)


@pytest.mark.parametrize("fn", [rmsnorm, rmsnorm_ref])
def test_bad_inputs_raise(fn):
    x, residual, weight = make_inputs((3, 16), torch.float32)
    with pytest.raises(ValueError, match="weight"):
        fn(x, weight[:8])
    with pytest.raises(ValueError, match="residual"):
        fn(x, weight, residual[:2])
    with pytest.raises(ValueError, match="eps"):
        fn(x, weight, eps=0.0)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_qwen_hidden(check_lowp):
    x, residual, weight = make_inputs((32, 32, 1536), torch.bfloat16, "cuda")
    normed, new_res = rmsnorm(x, weight, residual)
    ref_normed, ref_res = rmsnorm_ref(x, weight, residual)
    ref32_normed, ref32_res = rmsnorm_ref(*upcast(x, weight, residual))
    check_lowp(normed, ref32_normed, ref_normed, torch.bfloat16)
    assert torch.equal(new_res, ref_res)  # one rounding of the same fp32 sum on the GPU
