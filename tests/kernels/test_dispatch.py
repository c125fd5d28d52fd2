"""kernels/dispatch.py: backend choice from the argument, the environment and the device."""

import pytest
import torch

from diffvoice.kernels import ops
from diffvoice.kernels.dispatch import ENV_VAR, requested_backend, resolve_backend


def test_argument_beats_environment(monkeypatch):
    monkeypatch.setenv(ENV_VAR, "torch")
    assert requested_backend() == "torch"
    assert requested_backend("triton") == "triton"
    monkeypatch.delenv(ENV_VAR)
    assert requested_backend() == "auto"


def test_auto_uses_reference_off_gpu(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_backend("cpu") == "torch"  # even when TRITON_INTERPRET=1 is set
    assert resolve_backend("cpu", "torch") == "torch"


def test_bad_choice_names_its_source(monkeypatch):
    with pytest.raises(ValueError, match="backend argument"):
        resolve_backend("cpu", "cuda")
    monkeypatch.setenv(ENV_VAR, "fast")
    with pytest.raises(ValueError, match=ENV_VAR):
        resolve_backend("cpu")


@pytest.mark.skipif(torch.cuda.is_available(),
                    reason="on a CUDA machine triton is compiled, not interpreted (the GPU "
                           "tests below force it on CUDA tensors)")
def test_forced_triton_runs_on_cpu_under_interpreter(triton_backend, monkeypatch):
    monkeypatch.setenv(ENV_VAR, "triton")
    assert resolve_backend("cpu") == "triton"
    x = torch.randn(3, 40)
    weight = torch.rand(40) + 0.5
    got, _ = ops.rmsnorm(x, weight)  # env-forced: runs the Triton kernel
    want, _ = ops.rmsnorm(x, weight, backend="torch")
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_auto_uses_triton_on_gpu(monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert resolve_backend("cuda") == "triton"
