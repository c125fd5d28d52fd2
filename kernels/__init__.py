"""Fused kernels for the denoising step: Triton on CUDA, plain-PyTorch references everywhere.

Call the dispatched ops: `from diffvoice.kernels import ops; ops.unmask_confidence(...)`,
`ops.block_attention(...)`, `ops.rmsnorm(...)`, `ops.rotary(...)`. Each kernel module
(`kernels/NAME.py`) holds the Triton kernel, its wrapper `NAME` and `NAME_ref`; `kernels.dispatch`
chooses between them (env DIFFVOICE_KERNELS=auto|triton|torch).
`python -m diffvoice.kernels.bench` checks and times them on a GPU. This package knows nothing
about the engine, tokenizers or requests.
"""
