"""Shared setup for the kernel tests: device, seeding, and the tolerances (defined only here).

Without CUDA the Triton kernels run under Triton's CPU interpreter, which is best switched on
before triton is first imported (hence the environment line above the imports; kernels/_triton.py
also recovers when another library imported triton earlier). On a GPU machine the same tests run
the compiled kernels on CUDA tensors.

bf16 comparisons follow flash-attention's test style: the kernel's max error against an fp32
reference must stay within LOWP_FACTOR times the reference's own max error when it computes in
bf16, plus LOWP_ATOL scaled by the output's magnitude. (Triton 3.9's interpreter truncates
fp32 -> bf16 where the GPU rounds to nearest: up to one bf16 ulp instead of half of one, which
the factor of 2 and the half-ulp slack cover.)
"""

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402

from diffvoice.kernels._triton import HAS_TRITON, can_interpret  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = (torch.float32, torch.bfloat16)

# Same-precision comparisons (fp32 math on identical inputs): max abs error after rtol scaling.
TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.bfloat16: dict(atol=1e-5, rtol=1e-5)}
# Low-precision outputs: |kernel - ref_fp32|max
#   <= LOWP_FACTOR * |ref_lowp - ref_fp32|max + LOWP_ATOL * max(1, |ref_fp32|max).
LOWP_FACTOR = 2.0
LOWP_ATOL = {torch.float32: 1e-5, torch.bfloat16: 2.0**-8}  # bf16: half an ulp at magnitude 1


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(1234)


@pytest.fixture
def device():
    return DEVICE


@pytest.fixture
def triton_backend():
    """Skip when triton is not installed; fail loudly if the interpreter could not be enabled."""
    if not HAS_TRITON:
        pytest.skip("triton is not installed")
    if DEVICE == "cpu" and not can_interpret():
        pytest.fail("triton was imported before TRITON_INTERPRET=1 was set; set it in the "
                    "environment (or in tests/conftest.py) so Triton kernels can run on CPU")
    return "triton"


@pytest.fixture
def check_close():
    def check(actual, expected, dtype=torch.float32):
        torch.testing.assert_close(actual.float(), expected.float(), **TOL[dtype])
    return check


@pytest.fixture
def check_lowp():
    def check(actual, ref_fp32, ref_lowp, dtype):
        assert torch.isfinite(actual).all(), "kernel produced NaN/inf"
        err = (actual.float() - ref_fp32.float()).abs().max().item()
        base = (ref_lowp.float() - ref_fp32.float()).abs().max().item()
        scale = max(1.0, ref_fp32.float().abs().max().item())
        bound = LOWP_FACTOR * base + LOWP_ATOL[dtype] * scale
        assert err <= bound, f"max error {err:.3g} > {bound:.3g} (reference's own: {base:.3g})"
    return check
