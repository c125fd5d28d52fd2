"""What a request's SamplingParams mean for one model family: the authors' decoding by default.

`resolve(params, model_config) -> (params, DecodeRules)` turns family-agnostic knobs into the
concrete unmasking policy, threshold and decode block of that family, plus the block rules the
scheduler and runner follow. Pure Python; knows nothing about tensors.

decoding="reference" (the default) decodes as each family's own code does (upstream commits in
docs/fidelity.md; tests/engine/golden holds token sequences made by running that code):
  sdar          JetAstra/SDAR generate.py `block_diffusion_generate`: per block a fixed schedule
                from block length and steps (`get_num_transfer_tokens`); `low_confidence_dynamic`
                (default, tau 0.85, `>`) commits every slot above tau when there are at least the
                schedule's count, else the schedule's top-k; `low_confidence_static` is the top-k
                alone. The top-k runs over the whole block (decoded slots at -inf), so when fewer
                masks remain than the schedule asks for it also re-predicts decoded slots of the
                block, prompt tokens included, as upstream does. The last block is decoded in
                full with masks past max_new_tokens; the answer is cut at the first EOS.
  fast_dllm_v2  Fast-dLLM v2 `generate`: the first token of every block is the plain next-token
                prediction of the pass that stores the previous block (or of the prompt prefill)
                and is committed alone; then sub-blocks of `block_size` are decoded with
                `p > tau` (default 0.9) plus the most confident slot. Decoding stops once an EOS
                has no mask before it; masks behind an EOS stay masks.
  llada         ML-GSAI/LLaDA generate.py: 32-token semi-autoregressive blocks, low-confidence
                remasking with LLaDA's per-block split of the block's masks over the steps;
                `threshold` is Fast-dLLM v1's `p >= tau` plus the most confident slot. EOS is an
                ordinary token while decoding (no EOS fill); the answer is cut at the first EOS.
  dream         Dream `_sample` (maskgit_plus / entropy): the whole answer is one canvas; step i
                of `steps_per_block` commits int(n * (1 - s/t)) of the n masked slots (t, s from
                linspace(1, 1e-3, steps + 1)), everything left at the last step; no at-least-one.
  Confidences are softmax probabilities over the full vocabulary (the mask token included); the
  prediction never is the mask token (trained models never rank it first; see fidelity.md).
decoding="fast": the engine's own departures (not faster at batch 1 at the same policy; see
  docs/fidelity.md): the commit pass is fused with
  the block's first denoising pass (shifted families predict slot 0 with the block), slots behind
  a committed EOS are filled with EOS, low_confidence commits ceil(masks / passes left), the
  confidence softmax leaves the mask token out, bidirectional families decode 32-token blocks
  and may use the approximate prefix cache (EngineConfig.prefix_cache). With policy None it is
  low_confidence for every family (Fast-dLLM v2's threshold rule is then not used).
The engine's own policies ("low_confidence", "threshold", "entropy") can be named under either
decoding; where a family has no such rule upstream they are the engine's (listed in fidelity.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from diffvoice.engine.config import ModelConfig
from diffvoice.engine.params import SamplingParams


@dataclass(frozen=True)
class DecodeRules:
    decoding: str = "fast"
    first_token_ar: bool = False  # commit a new block's slot 0 alone from the previous logit
    eos_fill: bool = True  # fill the masks behind a committed EOS with EOS
    final_commits: bool = True  # committed slots never change (so a block may end early)
    full_vocab_confidence: bool = False  # confidence softmax includes the mask token
    prefix_cache: bool = True  # approximate prefix cache allowed (bidirectional families)
    dream_schedule: bool = False  # k = int(n * (1 - s/t)) per pass, no at-least-one


FAST = DecodeRules()

# family -> (policy for None, {user policy name -> family policy}, default tau)
_REFERENCE = {
    "sdar": ("sdar_dynamic", {"low_confidence": "sdar_static", "threshold": "sdar_dynamic"}, 0.85),
    "fast_dllm_v2": ("threshold", {}, 0.9),
    "llada": ("low_confidence", {"threshold": "threshold_ge"}, 0.9),
    "dream": ("dream_topk", {"low_confidence": "dream_topk", "entropy": "dream_entropy"}, 0.9),
}


def resolve(params: SamplingParams, mc: ModelConfig) -> tuple[SamplingParams, DecodeRules]:
    """-> (params with a concrete policy, threshold, block_size and decoding, the family's
    rules). decoding None is "reference" here; the engine first replaces it by the model's own
    default (engine.requests)."""
    if params.decoding is None:
        params = replace(params, decoding="reference")
    if params.decoding == "fast":
        policy = params.policy or "low_confidence"
        tau = 0.9 if params.threshold is None else params.threshold
        block = params.block_size or (mc.block_size if mc.block_causal else 32)
        return replace(params, policy=policy, threshold=tau, block_size=block), FAST
    default, mapping, tau_default = _REFERENCE[mc.family]
    policy = default if params.policy is None else mapping.get(params.policy, params.policy)
    tau = tau_default if params.threshold is None else params.threshold
    if mc.block_causal:
        block = params.block_size or mc.block_size
    elif mc.family == "dream":
        block = params.block_size or params.max_new_tokens  # the whole answer is one canvas
    else:
        block = params.block_size or 32
    rules = DecodeRules(
        decoding="reference", first_token_ar=mc.family == "fast_dllm_v2", eos_fill=False,
        final_commits=mc.family != "sdar", full_vocab_confidence=True, prefix_cache=False,
        dream_schedule=policy in ("dream_topk", "dream_entropy"))
    return replace(params, policy=policy, threshold=tau, block_size=block), rules


def sdar_schedule(block_length: int, steps: int) -> list[int]:
    """SDAR's `get_num_transfer_tokens`: block_length // steps each, the remainder first."""
    base, rem = divmod(block_length, steps)
    return [base + (1 if i < rem else 0) for i in range(steps)]


def careful(params: SamplingParams, mc: ModelConfig) -> SamplingParams:
    """The same request decoded one token per pass: "fast" low_confidence with as many passes
    per block as the decode block has slots (8 for the receptionists: twice the passes of their
    default 4). The clarify guard's second try at a reply that came out blended (two answers
    committed side by side in one pass); about twice the decoding time."""
    fast, _ = resolve(replace(params, decoding="fast"), mc)
    return replace(fast, policy="low_confidence",
                   steps_per_block=max(fast.block_size, params.steps_per_block))
