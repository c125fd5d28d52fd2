"""The engine's CPU attention (fused SDPA with an explicit mask) against the kernels package's
readable reference, on random inputs with mixed cache lengths, padding and both patterns."""

import pytest
import torch

from diffvoice.engine.attention import attend
from diffvoice.kernels.block_attention import block_attention_ref


@pytest.mark.parametrize("block_size", [0, 4])
@pytest.mark.parametrize("hq,hkv", [(4, 2), (3, 3)])
def test_attend_matches_kernel_reference(block_size, hq, hkv):
    g = torch.Generator().manual_seed(7)
    b, n, tc, d = 3, 7, 11, 16
    q = torch.randn(b, n, hq, d, generator=g)
    k, v = torch.randn(b, n, hkv, d, generator=g), torch.randn(b, n, hkv, d, generator=g)
    kc, vc = torch.randn(b, hkv, tc, d, generator=g), torch.randn(b, hkv, tc, d, generator=g)
    cache_lens = torch.tensor([0, 5, 11])
    positions = cache_lens[:, None] + torch.arange(n)[None]
    key_valid = torch.rand(b, n, generator=g) < 0.8
    key_valid[:, -1] = True
    got = attend(q, k, v, kc, vc, cache_lens, positions, key_valid, block_size)
    ref = block_attention_ref(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), kc, vc,
                              cache_lens, positions, key_valid, block_size).transpose(1, 2)
    # compare queries that see at least one key (blind padding queries differ by design)
    blk = positions // block_size if block_size else torch.zeros_like(positions)
    sees_new = (key_valid[:, None, :] & (blk[:, None, :] <= blk[:, :, None])).any(-1)
    sees = sees_new | (cache_lens[:, None] > 0)
    assert sees.sum() > b * n // 2
    assert torch.allclose(got[sees], ref[sees], atol=1e-5)
