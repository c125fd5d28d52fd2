"""Per-slot prediction from logits: the token to commit, its confidence and (optionally) entropy.

Greedy rows take the argmax; rows with temperature > 0 add Gumbel noise drawn from the request's
own generator (so a seeded request decodes the same whatever else is in the batch). Confidence is
the softmax probability of the chosen token under the untempered distribution (LLaDA's p(x0)).
The mask token is never predicted. Rows flagged `full_vocab` (the families' own decoders) take
that probability, and the entropy, over the full vocabulary with the mask token in the
denominator, as the reference loops do; other rows leave it out. Routes to
kernels.ops.unmask_confidence for greedy batches.
"""

from __future__ import annotations

import torch

from diffvoice.kernels.ops import (
    unmask_confidence as _fused,  # Triton on CUDA, its reference elsewhere
)


def predict(logits: torch.Tensor, mask_id: int, temperatures: list[float],
            generators: list[torch.Generator | None], need_entropy: bool,
            full_vocab: torch.Tensor | None = None, full_vocab_all: bool | None = None):
    """logits [B, W, V] -> (token [B, W] int64, conf [B, W] f32, entropy [B, W] f32 | None);
    full_vocab [B] bool or None (no row); full_vocab_all: the host knows every row is flagged
    (None: look)."""
    logits = logits.float()
    if logits.device.type == "cpu" and not any(t > 0 for t in temperatures):
        fast = _greedy_cpu(logits, mask_id, full_vocab, full_vocab_all, need_entropy)
        if fast is not None:
            return fast
    if full_vocab is not None:
        mask_logit = logits[..., mask_id].clone()
        full_entropy = _entropy(logits) if need_entropy else None
    logits[..., mask_id] = float("-inf")
    token, conf, entropy = _predict(logits, temperatures, generators, need_entropy)
    if full_vocab is None:
        return token, conf, entropy
    # p over V with the mask: p' / (1 + p' e^(l_mask - l_tok)), p' the probability without it
    l_tok = logits.gather(-1, token[..., None]).squeeze(-1)
    conf_full = conf / (1.0 + conf * torch.exp(mask_logit - l_tok))
    rows = full_vocab[:, None]
    conf = torch.where(rows, conf_full, conf)
    if entropy is not None:
        entropy = torch.where(rows, full_entropy, entropy)
    return token, conf, entropy


def _greedy_cpu(logits: torch.Tensor, mask_id: int, full_vocab: torch.Tensor | None,
                full_vocab_all: bool | None, need_entropy: bool = False):
    """Greedy rows on the CPU in a few ops: softmax, drop the mask token, max (the references'
    own `softmax(...).max(-1)`); with entropy, the full-vocabulary entropy from the same
    log-softmax. None when rows differ in `full_vocab` (the general path), or entropy is asked
    for rows without it."""
    if full_vocab is None:
        if need_entropy:
            return None
        logits[..., mask_id] = float("-inf")
        conf, token = logits.softmax(-1).max(-1)
        return token, conf, None
    if full_vocab_all is None:
        full_vocab_all = bool(full_vocab.all())
    if not full_vocab_all:
        return None
    entropy = None
    if need_entropy:  # the same ops as _entropy over the full vocabulary
        logp = torch.log_softmax(logits, dim=-1)
        p = logp.exp()
        entropy = -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)
    else:
        p = logits.softmax(-1)
    p[..., mask_id] = 0.0  # the mask token is never predicted; it stays in the denominator
    conf, token = p.max(-1)
    return token, conf, entropy


def _entropy(logits: torch.Tensor) -> torch.Tensor:
    logp = torch.log_softmax(logits, dim=-1)
    p = logp.exp()
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)


def _predict(logits, temperatures, generators, need_entropy):
    if not any(t > 0 for t in temperatures):
        token, conf, entropy = _fused(logits, need_entropy=need_entropy)
        return token, conf, entropy
    logp = torch.log_softmax(logits, dim=-1)
    token = logits.argmax(-1)
    if any(t > 0 for t in temperatures):
        rows = []
        for b, (t, g) in enumerate(zip(temperatures, generators, strict=True)):
            if t > 0:
                u = torch.rand(logits.shape[1:], generator=g, device=logits.device)
                gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
                rows.append((logits[b] / t + gumbel).argmax(-1))
            else:
                rows.append(token[b])
        token = torch.stack(rows)
    conf = logp.gather(-1, token[..., None]).squeeze(-1).exp()
    entropy = None
    if need_entropy:
        p = logp.exp()
        entropy = -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(-1)
    return token, conf, entropy
