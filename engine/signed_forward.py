"""The signed-residual batch-1 forward: small models in fp32 on the CPU, where every op costs
its dispatch rather than its arithmetic. The residual stream is carried as [x, -x] so that every
RMSNorm runs as one fused LayerNorm kernel and every matmul is one 2-D addmm/mm with the residual
add fused in. DiffusionLM.fuse_projections builds the weights (`signed_weights`) and
DiffusionLM._forward_planned / forward_rows call `forward_signed` where it applies. Knows nothing
about scheduling, masks ids or policies.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F


def signed_weights(model):
    """Weights of the batch-1 CPU path that carries the residual stream as [x, -x].

    RMSNorm(x) * w is exactly the first half of LayerNorm([x, -x]) * [w, w] (the doubled
    row has mean 0 and variance mean(x^2)), and LayerNorm is one fused CPU kernel where
    rms_norm runs as ~6 ops (~4x its time on these shapes). Layers that write the residual
    write [y, -y] (their weight stacked with its negation), layers that read it read the
    first half; every matmul is one addmm/mm on 2-D rows (the residual add fused in).
    Same math as `DiffusionLM._forward_planned`; float results differ by rounding only."""
    cfg = model.config
    w = model.embed.weight
    if (w.device.type != "cpu" or w.dtype != torch.float32
            or cfg.hidden_size > model.SIGNED_MAX_HIDDEN):
        return None

    def out_signed(m: torch.Tensor) -> torch.Tensor:  # [H, in] -> [in, 2H] for addmm
        return torch.cat((m, -m)).t().contiguous()

    def doubled(v: torch.Tensor) -> torch.Tensor:
        return torch.cat((v, v))

    width = (cfg.num_heads + cfg.num_kv_heads) * cfg.head_dim

    def with_rolled(m: torch.Tensor | None, qk_norm: bool) -> torch.Tensor | None:
        # without a q/k norm the rotary's roll(q, D/2) is a permutation of the projection's
        # outputs: computed by the same matmul from the permuted weight rows (one op less
        # per layer, and the rotation one addcmul)
        if m is None or qk_norm:
            return m
        qk = m[:width].unflatten(0, (-1, cfg.head_dim))
        return torch.cat((m[:width], qk.roll(cfg.head_dim // 2, 1).flatten(0, 1),
                          m[width:]))

    layers = [
        (doubled(in_w), in_eps, with_rolled(qkv_w, qk_norm).t().contiguous(),
         with_rolled(qkv_b, qk_norm), qk_w, qk_eps, qk_norm,
         out_signed(o_w), doubled(post_w), post_eps, gate_up_w.t().contiguous(),
         out_signed(down_w))
        for (in_w, in_eps, qkv_w, qkv_b, qk_w, qk_eps, qk_norm, o_w, post_w, post_eps,
             gate_up_w, down_w) in model.fused_layers]
    return SimpleNamespace(
        layers=layers, embed=torch.cat((w, -w), 1).contiguous(),
        norm=doubled(model.norm.weight), norm_eps=model.norm.eps,
        lm_head=model.lm_head.weight[: cfg.vocab_size].t().contiguous())


def forward_signed(model, input_ids, logits_start, plan, logits_end=None) -> torch.Tensor:
    """_forward_planned for one row that stores its K/V in the pool (plan.views) or reads no
    cache (plan.direct), on the weights of `signed_weights`. Returns [1, L', V]."""
    cfg = model.config
    h, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    hid = cfg.hidden_size
    hid2 = 2 * hid
    signed = model.signed_layers
    x = F.embedding(input_ids[0], signed.embed)  # [L, 2H]: [x, -x]
    n = x.shape[0]
    width = (h + hkv) * d
    cos, sin = plan.cos[0], plan.sin[0]  # [L, 1, D]
    views, off = plan.views, plan.pool[3] if plan.pool is not None else 0
    gqa = h != hkv
    mask = plan.mask
    last = len(signed.layers) - 1
    for i, (in_w, in_eps, qkv_w, qkv_b, qk_w, qk_eps, qk_norm, o_w, post_w, post_eps,
            gate_up_w, down_w) in enumerate(signed.layers):
        hx = torch.layer_norm(x, (hid2,), in_w, None, in_eps)[:, :hid]
        qkv = torch.mm(hx, qkv_w) if qkv_b is None else torch.addmm(qkv_b, hx, qkv_w)
        qk = qkv[:, :width].view(n, h + hkv, d)
        if qk_norm:
            v = qkv[:, width:].view(n, hkv, d)
            qk = torch.rms_norm(qk, (d,), None, qk_eps) * qk_w
            qk = qk * cos + qk.roll(d // 2, -1) * sin
        else:  # the rolled q/k come from the same matmul (`signed_weights`)
            v = qkv[:, 2 * width:].view(n, hkv, d)
            qk = torch.addcmul(qk * cos, qkv[:, width:2 * width].view(n, h + hkv, d), sin)
        q = qk[None, :, :h].transpose(1, 2)  # [1, Hq, L, D]
        if views is not None:
            k_dst, v_dst, keys, values = views[i]
            k_dst.copy_(qk[off:, h:])
            v_dst.copy_(v[off:])
        else:
            keys, values = qk[None, :, h:].transpose(1, 2), v[None].transpose(1, 2)
        if i == last and (logits_start or logits_end is not None):
            # the last layer's keys and values cover every row, but only the rows that
            # give logits need its queries, output projection and MLP (row-wise math)
            q, x = q[:, :, logits_start:logits_end], x[logits_start:logits_end]
            n = x.shape[0]
            if mask is not None:
                mask = mask[..., logits_start:logits_end, :]
            logits_start = 0
        attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                              enable_gqa=gqa)
        x = torch.addmm(x, attn[0].transpose(0, 1).reshape(n, h * d), o_w)
        hx = torch.layer_norm(x, (hid2,), post_w, None, post_eps)[:, :hid]
        gate, up = torch.mm(hx, gate_up_w).chunk(2, -1)
        x = torch.addmm(x, F.silu(gate) * up, down_w)
    hidden = torch.layer_norm(x[logits_start:], (hid2,), signed.norm, None,
                              signed.norm_eps)[:, :hid]
    return torch.mm(hidden, signed.lm_head)[None]
