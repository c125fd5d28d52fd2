"""The unmasking rules of the families' own decoders (engine.decoding says which is whose).

Same contract as the other policies, with the schedule in `knobs` (host-known per row):
  sdar_static / sdar_dynamic  SDAR `low_confidence_static` / `low_confidence_dynamic`: k =
      knobs.k_fixed (the block's fixed schedule); top-k over the block's slots with decoded slots
      at -inf, so a k larger than the masks left also selects decoded slots of the block
      (`knobs.block`), which the runner re-predicts, as upstream. torch.topk is called per
      distinct k on rows laid out as upstream's (the block), so ties break as upstream's do.
      dynamic: every masked slot with p > tau when there are at least k of them, else the top-k.
  threshold_ge  Fast-dLLM v1: every masked slot with p >= tau, plus the most confident one.
  dream_topk / dream_entropy  Dream `_sample`: k = int(n * knobs.dream_f) of the n masked slots
      by probability (maskgit_plus) or by negative entropy; k may be 0 (no at-least-one).
"""

from __future__ import annotations

import torch

from diffvoice.engine.policies.threshold import at_least_one


def _block_topk(conf, maskable, knobs):
    """Upstream SDAR's top-k: rows grouped by k (host-known), decoded slots at -inf."""
    score = torch.where(maskable, conf, torch.full_like(conf, float("-inf")))
    out = torch.zeros_like(maskable)
    ks = knobs.k_host
    for k in sorted(set(ks)):
        if k <= 0:
            continue
        rows = [i for i, v in enumerate(ks) if v == k]
        sel = torch.tensor(rows, device=conf.device) if len(rows) < len(ks) else None
        part = score if sel is None else score[sel]
        idx = torch.topk(part, min(k, part.shape[-1]), dim=-1).indices
        hit = torch.zeros_like(part, dtype=torch.bool).scatter_(-1, idx, True)
        if sel is None:
            out = hit
        else:
            out[sel] = hit
    return out & knobs.block


def commit_sdar_static(conf, entropy, maskable, knobs):
    return _block_topk(conf, maskable, knobs)


def commit_sdar_dynamic(conf, entropy, maskable, knobs):
    high = maskable & (conf > knobs.threshold[:, None])
    enough = high.sum(-1) >= knobs.k_fixed
    return torch.where(enough[:, None], high, _block_topk(conf, maskable, knobs))


def commit_threshold_ge(conf, entropy, maskable, knobs):
    commit = maskable & (conf >= knobs.threshold[:, None])
    return at_least_one(commit, conf, maskable)


def _dream(score, maskable, knobs):
    n = maskable.sum(-1)
    k = (n.float() * knobs.dream_f).floor().long()  # int(n * (1 - s / t)) in float32
    score = score.masked_fill(~maskable, float("-inf"))
    return top_k_rows(score, maskable, k)


def top_k_rows(score: torch.Tensor, maskable: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The k[b] best-scoring maskable slots of each row b (k <= its maskable slots), on the
    device: a stable sort, so an exact tie takes the earlier slot (the authors' loops call
    torch.topk, whose order among equal scores is unspecified)."""
    order = torch.argsort(score, dim=-1, descending=True, stable=True)
    rank = torch.empty_like(order).scatter_(-1, order, torch.arange(
        order.shape[-1], device=order.device).expand_as(order))
    return maskable & (rank < k[:, None])


def commit_dream_topk(conf, entropy, maskable, knobs):
    return _dream(conf, maskable, knobs)


def commit_dream_entropy(conf, entropy, maskable, knobs):
    return _dream(-entropy, maskable, knobs)  # Dream ranks by sum(p log p)


_TIMESTEPS: dict[int, list[float]] = {}


def dream_factor(step: int, steps: int) -> float:
    """1 - s/t of Dream's linear timesteps linspace(1, 1e-3, steps + 1) in float32; 1 at the
    last step (commit everything left)."""
    if step >= steps - 1:
        return 1.0
    if steps not in _TIMESTEPS:
        t = torch.linspace(1, 1e-3, steps + 1)
        _TIMESTEPS[steps] = (1 - t[1:] / t[:-1]).tolist()
    return _TIMESTEPS[steps][step]
