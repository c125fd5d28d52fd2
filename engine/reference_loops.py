"""Plain re-implementations of each family's own decoding loop (the authors' code, loop by loop).

Each function follows its upstream loop line by line (the commits are in
tests/engine/golden/PROVENANCE.md) but runs on engine.model.DiffusionLM with the whole sequence
recomputed every pass (exact for the block-causal families, whose upstream loops read a KV cache
of finished blocks). Greedy only, batch 1. They reproduce the upstream golden tokens
(tests/engine/test_golden.py), regenerate them (tests/engine/golden_loops.py), and are the
reference loop `diffvoice bench engine` measures the engine against.
"""

from __future__ import annotations

import torch


def _logits(model, ids: list[int]) -> torch.Tensor:
    """Logits [L, V] of a full forward with the family's own attention pattern (no shift)."""
    x = torch.tensor([ids])
    return model(x, torch.arange(len(ids))[None])[0].float()


def _greedy(logits: torch.Tensor):
    """argmax and its probability under the softmax over the full vocabulary."""
    p = torch.softmax(logits, dim=-1)
    conf, tok = p.max(dim=-1)
    return tok, conf, p


# ---------------------------------------------------------------- SDAR generate.py
def sdar_generate(model, prompt, mask_id, gen_length, block_length, denoising_steps,
                  remasking_strategy, confidence_threshold=0.85, stop_ids=()):
    """block_diffusion_generate: fixed schedule per block, top-k over the whole block."""
    plen = len(prompt)
    num_blocks = (plen + gen_length + block_length - 1) // block_length
    x = list(prompt) + [mask_id] * (num_blocks * block_length - plen)
    base, rem = divmod(block_length, denoising_steps)
    schedule = [base + (1 if i < rem else 0) for i in range(denoising_steps)]
    for b in range(plen // block_length, num_blocks):
        lo, hi = b * block_length, (b + 1) * block_length
        for step in range(denoising_steps + 1):
            masked = torch.tensor([t == mask_id for t in x[lo:hi]])
            if not masked.any():
                break  # upstream: the store-KV pass
            x0, x0_p, _ = _greedy(_logits(model, x[:hi])[lo:hi])
            confidence = torch.where(masked, x0_p, -torch.inf)
            k = int(schedule[step])
            if remasking_strategy == "low_confidence_static":
                transfer = torch.zeros_like(masked)
                transfer[torch.topk(confidence, k).indices] = True
            else:  # low_confidence_dynamic
                high = confidence > confidence_threshold
                if high.sum() >= k:
                    transfer = high
                else:
                    transfer = torch.zeros_like(masked)
                    transfer[torch.topk(confidence, k).indices] = True
            for i in transfer.nonzero().flatten().tolist():
                x[lo + i] = int(x0[i])  # also rewrites decoded slots the top-k picked
        if any(t in stop_ids for t in x[plen:]):
            break
    return x[plen:]


# ---------------------------------------------------------------- Fast-dLLM v2 generate()
def v2_generate(model, prompt, mask_id, max_new_tokens, threshold, small_block_size,
                block_size, stop_token):
    """generate(): AR first token per block, threshold (>) over sub-blocks, shifted logits."""
    x, plen0 = list(prompt), len(prompt)
    if len(x) > block_size and len(x) % block_size == 0:
        x.append(int(_logits(model, x)[-1].argmax()))

    def stopped(start):
        if stop_token not in x[start:]:
            return False
        j = x.index(stop_token, start)
        return mask_id not in x[start:j]

    for _ in range(max_new_tokens // block_size):
        if stop_token in x[plen0:]:
            break
        plen = len(x)
        x += [mask_id] * (block_size - plen % block_size)
        lo = len(x) - block_size
        while True:
            if stopped(plen):
                break
            if mask_id not in x[lo:]:  # commit pass: its last logit is the next first token
                x.append(int(_logits(model, x)[-1].argmax()))
                break
            for sb in range(block_size // small_block_size):
                s0, s1 = lo + sb * small_block_size, lo + (sb + 1) * small_block_size
                while mask_id in x[s0:s1] and not stopped(plen):
                    lg = _logits(model, x)
                    lg = torch.cat((lg[lo:lo + 1], lg[lo:-1]))[s0 - lo:s1 - lo]  # shift by one
                    x1, p1, _ = _greedy(lg)
                    masked = torch.tensor([t == mask_id for t in x[s0:s1]])
                    p1 = torch.where(masked, p1, -torch.inf)
                    unmask = p1 > threshold
                    unmask[p1.argmax()] = True
                    for i in (unmask & masked).nonzero().flatten().tolist():
                        x[s0 + i] = int(x1[i])
    out = x[plen0:]
    return out[: out.index(stop_token) + 1] if stop_token in out else out


# ---------------------------------------------------------------- LLaDA / Fast-dLLM v1
def llada_generate(model, prompt, mask_id, steps, gen_length, block_length, threshold=None):
    """ML-GSAI/LLaDA generate() (low_confidence), or with `threshold` Fast-dLLM v1's loop
    (p >= tau plus the most confident slot, blocks decoded until no mask is left)."""
    plen = len(prompt)
    x = list(prompt) + [mask_id] * gen_length
    num_blocks = gen_length // block_length
    steps //= num_blocks
    for b in range(num_blocks):
        lo, hi = plen + b * block_length, plen + (b + 1) * block_length
        n = sum(t == mask_id for t in x[lo:hi])
        split = [n // steps + (1 if i < n % steps else 0) for i in range(steps)]
        i = 0
        while True if threshold is not None else i < steps:
            masked = torch.tensor([t == mask_id for t in x])
            masked[hi:] = False
            x0, x0_p, _ = _greedy(_logits(model, x))
            confidence = torch.where(masked, x0_p, -torch.inf)
            if threshold is None:
                chosen = torch.topk(confidence, split[i]).indices.tolist()
            else:
                chosen = ((confidence >= threshold) & masked).nonzero().flatten().tolist()
                chosen.append(int(confidence.argmax()))
            for j in chosen:
                if masked[j]:
                    x[j] = int(x0[j])
            i += 1
            if threshold is not None and mask_id not in x[lo:hi]:
                break
    return x[plen:]


# ---------------------------------------------------------------- Dream _sample
def dream_generate(model, prompt, mask_id, max_new_tokens, steps, alg):
    """DreamGenerationMixin._sample: one canvas, k = int(n * (1 - s/t)), shifted logits."""
    plen = len(prompt)
    x = list(prompt) + [mask_id] * max_new_tokens
    timesteps = torch.linspace(1, 1e-3, steps + 1)
    for i in range(steps):
        masked = torch.tensor([t == mask_id for t in x])
        lg = _logits(model, x)
        lg = torch.cat((lg[:1], lg[:-1]))
        x0, conf, p = _greedy(lg[masked])
        if alg == "entropy":
            conf = torch.sum(p * torch.log(p + 1e-10), dim=-1)
        n = masked.sum() / 1
        t, s = timesteps[i], timesteps[i + 1]
        k = int(n * (1 - s / t)) if i < steps - 1 else int(n)
        full = torch.full((len(x),), -torch.inf)
        full[masked] = conf
        proposal = torch.full((len(x),), mask_id)
        proposal[masked] = x0
        if k > 0:
            for j in torch.topk(full, k).indices.tolist():
                x[j] = int(proposal[j])
    return x[plen:]


# ---------------------------------------------------------------- dispatch
def run_case(family: str, model, cfg, case: dict) -> list[int]:
    """The family's loop for one golden case -> the upstream output it must equal."""
    ids, st = case["prompt_ids"], case["setting"]
    mask, eos = int(cfg.mask_token_id), list(cfg.eos_token_ids)
    if family == "sdar":
        return sdar_generate(model, ids, mask, case["max_new_tokens"], st["block_length"],
                             st["denoising_steps"], st["remasking_strategy"],
                             st.get("confidence_threshold", 0.85), eos)
    if family == "fast_dllm_v2":
        return v2_generate(model, ids, mask, case["upstream_max_new_tokens"], st["threshold"],
                           st["small_block_size"], cfg.block_size, eos[0])
    if family == "llada":
        return llada_generate(model, ids, mask, st["steps"], st["gen_length"],
                              st["block_length"], st.get("threshold"))
    return dream_generate(model, ids, mask, st["max_new_tokens"], st["steps"], st["alg"])



def loop_for(model, params, cfg):
    """The family's own loop for resolved SamplingParams (engine.decoding.resolve) as a function
    prompt_ids -> generated ids that never stops at EOS (as the engine with ignore_eos), or None
    where the rule is not the authors' (the engine's own policies, decoding="fast")."""
    mask, fam, steps = int(cfg.mask_token_id), cfg.family, params.steps_per_block
    n, block, policy = params.max_new_tokens, params.block_size, params.policy
    if params.decoding != "reference":
        return None
    if fam == "sdar" and policy in ("sdar_static", "sdar_dynamic"):
        strategy = "low_confidence_" + policy.removeprefix("sdar_")
        return lambda ids: sdar_generate(model, ids, mask, n, block, steps, strategy,
                                         params.threshold)[:n]
    if fam == "fast_dllm_v2" and policy == "threshold":
        total = (-(-n // cfg.block_size) + 1) * cfg.block_size  # blocks after the prompt's
        return lambda ids: v2_generate(model, ids, mask, total, params.threshold, block,
                                       cfg.block_size, -1)[:n]
    if fam == "llada" and policy in ("low_confidence", "threshold_ge") and n % block == 0:
        tau = params.threshold if policy == "threshold_ge" else None
        return lambda ids: llada_generate(model, ids, mask, steps * (n // block), n, block, tau)
    if fam == "dream" and policy in ("dream_topk", "dream_entropy") and block == n:
        alg = "maskgit_plus" if policy == "dream_topk" else "entropy"
        return lambda ids: dream_generate(model, ids, mask, n, steps, alg)
    return None
