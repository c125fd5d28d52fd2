"""Block-diffusion training batches (SDAR / BD3-LM style) matching the engine's decoding exactly.

Inference (engine): blocks are aligned to absolute positions (block k = [k*bs, (k+1)*bs)); a query
at position i sees key j iff j//bs <= i//bs; the prompt's last partial block is decoded together
with the first reply tokens (prompt tokens fixed, the rest masked); earlier blocks are clean.

Training, vectorised over all reply blocks of an example at once: the model input is
    [ clean blocks 0 .. nb-2 ]  ++  [ noisy copies of blocks b0 .. nb-1 ]
where b0 = len(prompt) // bs is the first block holding reply tokens and nb the number of blocks.
Both halves carry their true absolute positions. Visibility:
    clean query -> clean key   iff key block <= query block      (what the KV cache holds)
    noisy query -> clean key   iff key block <  query block      (the clean prefix)
    noisy query -> noisy key   iff same block                    (the block being denoised)
    clean query -> noisy key   never
so each noisy block sees exactly what the engine shows it. In each noisy block, k of its n reply
slots (k ~ uniform 1..n) are replaced by the mask token; prompt slots are never masked. The loss is
the cross-entropy over masked slots. Replies end with EOS, padded with EOS to the block's end.
Knows nothing about tokenizers' text, facts or optimizers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

IGNORE = -100


@dataclass
class Batch:
    input_ids: torch.Tensor   # [B, L] int64
    positions: torch.Tensor   # [B, L] int64
    attn_mask: torch.Tensor   # [B, 1, L, L] bool, True = may attend
    targets: torch.Tensor     # [B, L] int64, IGNORE where no loss
    num_tokens: int           # real (non-padding) input tokens
    num_masked: int           # slots scored by the loss


def example_layout(prompt: list[int], reply: list[int], block_size: int, eos_id: int):
    """clean sequence x0 (EOS-padded to a block multiple), first reply block b0, block count nb."""
    if not prompt or not reply:
        raise ValueError("prompt and reply must both be non-empty")
    x0 = list(prompt) + list(reply)
    nb = -(-len(x0) // block_size)
    x0 += [eos_id] * (nb * block_size - len(x0))
    return x0, len(prompt) // block_size, nb


def build_batch(prompts: list[list[int]], replies: list[list[int]], block_size: int,
                mask_id: int, eos_id: int, generator: torch.Generator, row_len: int = 128) -> Batch:
    """replies must already end with EOS. Randomness (which slots are masked) comes only from
    `generator`, so a batch is reproducible from its seed. Examples are packed into rows of
    max(row_len, longest example) slots."""
    rows_ids, rows_pos, rows_noisy, rows_tgt = [], [], [], []
    for prompt, reply in zip(prompts, replies, strict=True):
        x0, b0, nb = example_layout(prompt, reply, block_size, eos_id)
        n_clean = (nb - 1) * block_size
        x0_t = torch.tensor(x0, dtype=torch.long)
        noisy = x0_t[b0 * block_size:].clone()
        target = torch.full_like(noisy, IGNORE)
        reply_start = len(prompt) - b0 * block_size  # first reply slot inside the noisy part
        for b in range(nb - b0):
            lo, hi = max(b * block_size, reply_start), (b + 1) * block_size
            n = hi - lo
            k = int(torch.randint(1, n + 1, (1,), generator=generator))
            chosen = lo + torch.randperm(n, generator=generator)[:k]
            target[chosen] = noisy[chosen]
            noisy[chosen] = mask_id
        rows_ids.append(torch.cat((x0_t[:n_clean], noisy)))
        rows_pos.append(torch.cat((torch.arange(n_clean),
                                   torch.arange(b0 * block_size, nb * block_size))))
        rows_noisy.append(torch.cat((torch.zeros(n_clean, dtype=torch.bool),
                                     torch.ones(len(noisy), dtype=torch.bool))))
        rows_tgt.append(torch.cat((torch.full((n_clean,), IGNORE), target)))
    # pack examples into rows (first-fit, longest first): padding would otherwise be ~half the
    # compute, since replies range from 2 to 6 blocks. Examples in one row never see each other.
    length = max(row_len, max(len(r) for r in rows_ids))
    rows: list[list[int]] = []
    fill: list[int] = []
    for i in sorted(range(len(rows_ids)), key=lambda i: -len(rows_ids[i])):
        n = len(rows_ids[i])
        for r, used in enumerate(fill):
            if used + n <= length:
                rows[r].append(i)
                fill[r] += n
                break
        else:
            rows.append([i])
            fill.append(n)
    length = max(fill)
    shape = (len(rows), length)
    input_ids = torch.full(shape, eos_id, dtype=torch.long)
    positions = torch.zeros(shape, dtype=torch.long)
    is_noisy = torch.zeros(shape, dtype=torch.bool)
    segment = torch.full(shape, -1, dtype=torch.long)  # -1 = padding
    targets = torch.full(shape, IGNORE, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            n = len(rows_ids[i])
            sl = slice(at, at + n)
            input_ids[r, sl], positions[r, sl] = rows_ids[i], rows_pos[i]
            is_noisy[r, sl], targets[r, sl], segment[r, sl] = rows_noisy[i], rows_tgt[i], i
            at += n
    attn_mask = block_diffusion_mask(positions, is_noisy, segment, block_size)
    return Batch(input_ids, positions, attn_mask, targets, num_tokens=int((segment >= 0).sum()),
                 num_masked=int((targets != IGNORE).sum()))


def block_diffusion_mask(positions: torch.Tensor, is_noisy: torch.Tensor, segment: torch.Tensor,
                         block_size: int) -> torch.Tensor:
    """[B, L] tensors -> [B, 1, L, L] bool (query rows, key columns); see module docstring.
    segment: which packed example a slot belongs to (-1 = padding); examples never mix."""
    blk = positions // block_size
    q_blk, k_blk = blk[:, :, None], blk[:, None, :]  # [B, L, 1], [B, 1, L]
    q_noisy, k_noisy = is_noisy[:, :, None], is_noisy[:, None, :]
    clean_clean = ~q_noisy & ~k_noisy & (k_blk <= q_blk)
    noisy_clean = q_noisy & ~k_noisy & (k_blk < q_blk)
    noisy_noisy = q_noisy & k_noisy & (k_blk == q_blk)
    valid = segment >= 0
    same = (segment[:, :, None] == segment[:, None, :]) & valid[:, :, None]
    mask = (clean_clean | noisy_clean | noisy_noisy) & same
    eye = torch.eye(positions.shape[1], dtype=torch.bool)[None]
    mask = mask | (eye & ~valid[:, :, None])  # padding rows see themselves: finite, unused
    return mask[:, None]


def scored_loss(model, batch: Batch) -> torch.Tensor:
    """= masked_loss(model(batch...), batch.targets), but the output layer (norm + lm_head, a
    fifth of the compute) runs only on the scored slots. `model` is an engine.model.DiffusionLM:
    its forward ends in `self.logits(hidden)`, which is bypassed for the call."""
    scored = batch.targets != IGNORE
    logits_of = model.logits
    model.logits = lambda hidden: hidden  # instance attribute: forward returns hidden states
    try:
        hidden = model(batch.input_ids, batch.positions, attn_mask=batch.attn_mask)
    finally:
        del model.logits
    return F.cross_entropy(logits_of(hidden[scored]), batch.targets[scored])


def masked_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy over scored slots. logits [B, L, V], targets [B, L]."""
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
