"""The runner's seam for constrained rows: logit masks and commit blocking inside a pass.

    logits, maskable = constrain_pass(rows, logits, wpos, cur, maskable, mask_id, faults)
    after_pass(runner, rows, window_start, tokens, faults)
Only rows whose Sequence carries a `constraint` (a ConstrainedState) are touched; ordinary rows
in the same batch are left exactly as they were. A forced token gets logit 0 and every other
token -inf (so its confidence is 1 and the policy commits it first); an allowed set keeps the
model's logits on the set; a blocked position is removed from `maskable` (it waits a pass).
Costs one small device-to-host read per constrained row per pass (the decide pass's
probabilities, Choice scores); unconstrained batches pay nothing.
A row whose constraint raises is isolated, not propagated: its exception goes into `faults`
(row index -> exception), it commits nothing this pass, and the engine fails that request
alone; every other row of the batch is decoded exactly as if the row were not there.
"""

from __future__ import annotations

import torch


def constrain_pass(rows, logits: torch.Tensor, wpos: torch.Tensor, cur: torch.Tensor,
                   maskable: torch.Tensor, mask_id: int, faults: dict | None = None):
    idx = [i for i, r in enumerate(rows) if getattr(r, "constraint", None) is not None]
    if not idx:
        return logits, maskable
    logits = logits.clone()
    maskable = maskable.clone()
    wpos_h = wpos[idx].tolist()
    cur_h = cur[idx].tolist()
    neg = torch.finfo(logits.dtype).min
    for n, i in enumerate(idx):
        seq = rows[i]
        rel = [p - seq.prompt_len for p in wpos_h[n]]
        row = logits[i]  # a view: a failed row's half-written logits are never used
        try:
            forced, allowed, banned, blocked = seq.constraint.rules(rel, cur_h[n], mask_id,
                                                                    logits[i])
            for w, tok in forced.items():
                row[w] = neg
                row[w, tok] = 0.0
            for w, allow in allowed.items():
                row[w] = torch.where(allow, row[w], neg)
            for w, tok in banned.items():
                row[w, tok] = neg
            if blocked:
                maskable[i, sorted(blocked)] = False
        except Exception as exc:  # this request's schema: fail it alone (see module doc)
            if faults is None:
                raise
            faults[i] = exc
            maskable[i] = False
    return logits, maskable


def after_pass(runner, rows, window_start: list[int], tokens: list[list[int]],
               faults: dict | None = None) -> None:
    for i, seq in enumerate(rows):
        state = getattr(seq, "constraint", None)
        if state is None or (faults is not None and i in faults):
            continue
        rel = [window_start[i] + w - seq.prompt_len for w in range(len(tokens[i]))]
        try:
            state.observe(runner, seq, rel, tokens[i])
        except Exception as exc:  # this request's schema: fail it alone (see module doc)
            if faults is None:
                raise
            faults[i] = exc
