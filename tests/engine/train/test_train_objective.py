"""Block-diffusion batches: each noisy block sees exactly what the engine shows it at inference
(a plain block-causal forward over the clean prefix plus that block), masks never touch the
prompt, replies are EOS-padded to the block end."""

import random

import torch

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.train.objective import IGNORE, build_batch, example_layout

BS, V, MASK, EOS = 4, 50, 49, 48


def _model(seed=1):
    cfg = ModelConfig(family="sdar", vocab_size=V, hidden_size=32, num_layers=2, num_heads=2,
                      num_kv_heads=1, head_dim=16, intermediate_size=64, block_size=BS,
                      mask_token_id=MASK, eos_token_ids=(EOS,), max_position_embeddings=256)
    model = DiffusionLM(cfg)
    model.init_weights(std=0.3, generator=torch.Generator().manual_seed(seed))
    return model.eval()


def _examples(n, seed):
    rng = random.Random(seed)
    prompts = [[rng.randrange(40) for _ in range(rng.randint(1, 9))] for _ in range(n)]
    replies = [[rng.randrange(40) for _ in range(rng.randint(1, 11))] + [EOS] for _ in range(n)]
    return prompts, replies


def test_noisy_block_logits_match_a_plain_block_causal_forward():
    model = _model()
    prompts, replies = _examples(7, seed=0)
    batch = build_batch(prompts, replies, BS, MASK, EOS, torch.Generator().manual_seed(3),
                        row_len=40)
    assert batch.input_ids.shape[0] < 7  # examples were packed several to a row
    with torch.no_grad():
        logits = model(batch.input_ids, batch.positions, attn_mask=batch.attn_mask)
    checked = 0
    for r in range(batch.input_ids.shape[0]):
        for i in (batch.targets[r] != IGNORE).nonzero().flatten().tolist():
            keys = batch.attn_mask[r, 0, i].nonzero().flatten()
            keys = keys[torch.argsort(batch.positions[r, keys])]
            pos = batch.positions[r, keys]
            # the visible context is a contiguous prefix: clean blocks, then the noisy block
            assert torch.equal(pos, torch.arange(len(keys)))
            assert (pos // BS).max() == batch.positions[r, i] // BS
            with torch.no_grad():
                ref = model(batch.input_ids[r, keys][None], pos[None])  # default mask
            j = (keys == i).nonzero().item()
            torch.testing.assert_close(logits[r, i], ref[0, j], atol=1e-4, rtol=1e-4)
            checked += 1
    assert checked == batch.num_masked > 20


def test_masks_cover_reply_blocks_only_and_replies_pad_with_eos():
    prompts, replies = _examples(30, seed=5)
    batch = build_batch(prompts, replies, BS, MASK, EOS, torch.Generator().manual_seed(0))
    again = build_batch(prompts, replies, BS, MASK, EOS, torch.Generator().manual_seed(0))
    assert torch.equal(batch.input_ids, again.input_ids)  # reproducible from the seed
    scored = batch.targets != IGNORE
    assert torch.all(batch.input_ids[scored] == MASK)
    assert torch.all(batch.input_ids[~scored] != MASK)  # prompts and clean copies never masked
    n_blocks = 0
    for prompt, reply in zip(prompts, replies, strict=True):
        x0, b0, nb = example_layout(prompt, reply, BS, EOS)
        assert len(x0) % BS == 0 and x0[len(prompt) + len(reply):] == [EOS] * (
            len(x0) - len(prompt) - len(reply))
        n_blocks += nb - b0
    assert n_blocks <= batch.num_masked  # at least one masked slot per reply block
    assert int(scored.sum()) == batch.num_masked


def test_scored_loss_equals_the_full_logits_loss_and_gradients():
    from diffvoice.engine.train.objective import masked_loss, scored_loss

    prompts, replies = _examples(6, 3)
    batch = build_batch(prompts, replies, BS, MASK, EOS, torch.Generator().manual_seed(0))
    full_model, fast_model = _model(2).train(), _model(2).train()
    full = masked_loss(full_model(batch.input_ids, batch.positions, attn_mask=batch.attn_mask),
                       batch.targets)
    fast = scored_loss(fast_model, batch)
    full.backward()
    fast.backward()
    assert torch.allclose(full, fast, atol=1e-6)
    for (name, a), (_, b) in zip(full_model.named_parameters(), fast_model.named_parameters(),
                                 strict=True):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), name
    assert "logits" not in vars(fast_model)  # the bypass is undone
