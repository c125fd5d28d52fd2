"""The full-recompute decoding loop: the whole sequence recomputed every pass, no KV cache.

`reference_decode` follows the same block schedule, unmasking policies and family rules
(engine.decoding: first-token pass, EOS handling, fixed schedules) as the engine but with plain
`model.forward` over [prompt + canvas] each pass, batch 1. It is the oracle in tests (cached and
uncached decoding must agree for block-causal models) and, with one token committed per pass
(low_confidence, steps_per_block = block), the vanilla LLaDA loop that `diffvoice bench engine`
compares against. The families' authors' loops themselves are re-implemented plainly in
tests/engine/golden_loops.py and checked against tokens made by the authors' code.
"""

from __future__ import annotations

import torch

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.decoding import resolve
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.params import SamplingParams
from diffvoice.engine.policies import NEEDS_ENTROPY, POLICY_IDS, PolicyKnobs, commit_mixed
from diffvoice.engine.sampling import predict
from diffvoice.engine.sequence import Sequence


@torch.inference_mode()
def reference_decode(model: DiffusionLM, cfg: ModelConfig, prompt_ids: list[int],
                     params: SamplingParams,
                     decode_block: int | None = None) -> tuple[list[int], int]:
    """-> (generated ids cut at EOS, number of forward passes). Greedy only."""
    if params.temperature > 0:
        raise ValueError("reference_decode is greedy only")
    if decode_block is not None:
        params = SamplingParams(**{**params.__dict__, "block_size": decode_block})
    params, rules = resolve(params, cfg)
    mbs = cfg.block_size if cfg.block_causal else 0
    s = Sequence("ref", list(prompt_ids), params, mbs, params.block_size, int(cfg.logit_shift),
                 prefix_cache=False, rules=rules)
    mask_id, eos = int(cfg.mask_token_id), set(cfg.eos_token_ids)
    device = next(model.parameters()).device
    eos_ids = torch.tensor(sorted(eos), device=device)
    x = torch.full((s.canvas_end,), mask_id, dtype=torch.long, device=device)
    x[: s.prompt_len] = torch.tensor(prompt_ids, device=device)
    if rules.eos_fill:
        x[s.gen_end:] = cfg.eos_token_ids[0]
    positions = torch.arange(s.canvas_end, device=device)[None]
    generated, passes = [], 0

    def on(values, dtype=None):  # one-row tensors on the model's device
        return torch.tensor(values, dtype=dtype, device=device)

    while True:
        logits = model(x[None], positions)[0]  # [N, V]
        passes += 1
        if cfg.logit_shift:
            logits = torch.cat((logits[:1], logits[:-1]))
        lo, hi = s.q_start, s.q_end
        pos = torch.arange(lo, hi, device=device)
        cur = x[lo:hi]
        maskable = (cur == mask_id) & (pos >= s.d_start) & (pos < s.d_end)
        pred, conf, ent = predict(logits[None, lo:hi].clone(), mask_id, [0.0], [None],
                                  params.policy in NEEDS_ENTROPY,
                                  on([rules.full_vocab_confidence]))
        if s.first_token_due:
            commit = maskable & (pos == s.d_start)
        else:
            knobs = PolicyKnobs(on([s.steps_left]), on([params.threshold]),
                                on([params.entropy_bound]), k_fixed=on([s.k_fixed]),
                                k_host=[s.k_fixed],
                                block=((pos >= s.block_start) & (pos < s.d_end))[None],
                                dream_f=on([s.dream_f], torch.float32))
            commit = commit_mixed([params.policy], on([POLICY_IDS[params.policy]]),
                                  conf, ent, maskable[None], knobs)[0]
        new = torch.where(commit, pred[0], cur)
        is_eos = torch.isin(new, eos_ids) & (pos >= s.prompt_len) & (not params.ignore_eos)
        if rules.eos_fill:
            after = (is_eos.long().cumsum(0) - is_eos.long()) > 0
            new = torch.where(after & (new == mask_id), cfg.eos_token_ids[0], new)
        x[lo:hi] = new
        counted = (pos >= s.d_start) & (pos < s.d_end)
        if rules.final_commits:
            counted &= (pos < s.gen_end) & (is_eos.long().cumsum(0) == 0)
        if s.first_token_due:
            s.ar_pos = s.d_start
        else:
            s.steps_in_block += 1
        if bool(((new == mask_id) & counted).any()):
            continue
        room = s.gen_end - s.d_start
        block = x[s.d_start:s.d_end].tolist()[:room]
        stop = len(block) >= room
        if not params.ignore_eos:
            for j, tid in enumerate(block):
                if tid in eos:
                    block, stop = block[:j], True
                    break
        generated.extend(block)
        if stop:
            return generated, passes
        s.d_start, s.steps_in_block = s.d_end, 0
