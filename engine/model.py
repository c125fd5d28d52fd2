"""The decoder shared by every supported dLLM family (see engine.config for the table).

Two entry points:
  forward(input_ids, positions, attn_mask)            training / reference: no cache, explicit mask
  forward_step(input_ids, positions, key_valid, ...)  inference: reads the slot KV cache, writes the
                                                      new tokens' K/V where `write_pos` says so
forward_step is the one inference path: eager with the runner's AttnPlan (engine.pass_plan), or
with the geometry built for the pass where there is none (fixed-shape passes and CUDA graphs,
engine.cuda_graphs; the Triton attention kernel).
Weights use one internal naming (Qwen-style); engine.loader maps each family's names onto it.
The model knows nothing about masks ids, tokenizers, policies or scheduling.
"""

from __future__ import annotations

import json

import torch
import torch.nn.functional as F
from torch import nn

from diffvoice.engine.attention import attention_mask, uses_mask
from diffvoice.engine.config import ModelConfig
from diffvoice.engine.plan_types import AttnPlan
from diffvoice.engine.rope import inv_freq as rope_inv_freq
from diffvoice.kernels.ops import block_attention, rmsnorm
from diffvoice.kernels.ops import rotary as rotary_kernel


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        if dtype == torch.float32:  # one fused op; same math as below
            return F.rms_norm(x, x.shape[-1:], self.weight, self.eps)
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


_INV_FREQ: dict[tuple, tuple[torch.Tensor, float]] = {}


def rotary(positions: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype,
           scaling: dict | None = None, max_positions: int = 4096):
    """cos/sin tables [B, L, head_dim] for absolute positions [B, L] (rotate_half convention);
    `scaling` is the config's rope_scaling (engine.rope), None for plain RoPE."""
    key = (head_dim, theta, positions.device,
           None if scaling is None else json.dumps(scaling, sort_keys=True), max_positions)
    cached = _INV_FREQ.get(key)
    if cached is None:
        cached = _INV_FREQ[key] = rope_inv_freq(head_dim, theta, scaling, max_positions,
                                                positions.device)
    inv_freq, attention_factor = cached
    freqs = positions.float()[..., None] * inv_freq  # [B, L, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    if attention_factor != 1.0:  # yarn scales cos/sin (transformers' attention_scaling)
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # x: [B, L, H, D]; cos/sin: [B, L, D], or [B, L, 1, D] (unsqueezed once per pass)
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    if cos.dim() == 3:
        cos, sin = cos[:, :, None], sin[:, :, None]
    return x * cos + rotated * sin


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.qkv_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.qkv_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=False)
        if cfg.qk_norm:
            self.q_norm = RMSNorm(d, cfg.rms_norm_eps)
            self.k_norm = RMSNorm(d, cfg.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = None
        self.gate_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(h, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, h, bias=False)
        self.input_norm = RMSNorm(h, cfg.rms_norm_eps)
        self.post_norm = RMSNorm(h, cfg.rms_norm_eps)

    fused_qkv: torch.Tensor | None = None  # set by DiffusionLM.fuse_projections()
    fused_qkv_bias: torch.Tensor | None = None
    fused_gate_up: torch.Tensor | None = None

    def qkv(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        b, n, _ = x.shape
        if self.fused_qkv is not None:  # one matmul instead of three
            return self._qkv_fused(x, cos, sin)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        q = q.view(b, n, self.num_heads, self.head_dim)
        k = k.view(b, n, self.num_kv_heads, self.head_dim)
        v = v.view(b, n, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        return apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v  # each [B, L, H, D]

    fused_qk_norm: torch.Tensor | None = None  # [Hq + Hkv, D]: q_norm / k_norm weights

    def _qkv_fused(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """The same math as the unfused path with fewer ops (the per-op cost dominates small
        models): q and k are normed and rotated together as one [B, L, Hq + Hkv, D] view."""
        b, n, _ = x.shape
        h, hkv, d = self.num_heads, self.num_kv_heads, self.head_dim
        out = F.linear(x, self.fused_qkv, self.fused_qkv_bias)
        qk = out[..., : (h + hkv) * d].view(b, n, h + hkv, d)
        v = out[..., (h + hkv) * d:].view(b, n, hkv, d)
        if self.q_norm is not None:
            if qk.dtype == torch.float32:
                qk = F.rms_norm(qk, (d,), None, self.q_norm.eps) * self.fused_qk_norm
            else:
                qk = torch.cat((self.q_norm(qk[:, :, :h]), self.k_norm(qk[:, :, h:])), 2)
        qk = apply_rotary(qk, cos, sin)
        return qk[:, :, :h], qk[:, :, h:], v

    def mlp(self, x: torch.Tensor) -> torch.Tensor:
        if self.fused_gate_up is not None:
            gate, up = F.linear(x, self.fused_gate_up).chunk(2, dim=-1)
            return self.down_proj(F.silu(gate) * up)
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DiffusionLM(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embed = nn.Embedding(cfg.num_embeddings, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.num_embeddings, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed.weight
        self._rope_tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # rope_tables()

    def init_weights(self, std: float = 0.02, generator: torch.Generator | None = None) -> None:
        """Random init for fixtures and training from scratch (norms at 1, biases at 0)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight"):
                nn.init.ones_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                device = generator.device if generator is not None else p.device
                with torch.no_grad():  # drawn where the generator lives (on the GPU if no seed)
                    p.copy_(torch.randn(p.shape, generator=generator, device=device) * std)

    @torch.no_grad()
    def fuse_projections(self) -> None:
        """For inference: q/k/v and gate/up each become one matmul. The separate weights turn
        into views of the fused tensors, so no memory is duplicated; do not train afterwards."""
        for layer in self.layers:
            parts = (layer.q_proj, layer.k_proj, layer.v_proj)
            layer.fused_qkv = torch.cat([p.weight for p in parts])
            for p, w in zip(parts, layer.fused_qkv.split([p.weight.shape[0] for p in parts]),
                            strict=True):
                p.weight.data = w
            if layer.q_proj.bias is not None:
                layer.fused_qkv_bias = torch.cat([p.bias for p in parts])
                for p, b in zip(parts, layer.fused_qkv_bias.split(
                        [p.bias.shape[0] for p in parts]), strict=True):
                    p.bias.data = b
            if layer.q_norm is not None:
                layer.fused_qk_norm = torch.cat((
                    layer.q_norm.weight[None].expand(layer.num_heads, -1),
                    layer.k_norm.weight[None].expand(layer.num_kv_heads, -1)))
            layer.fused_gate_up = torch.cat([layer.gate_proj.weight, layer.up_proj.weight])
            gate, up = layer.fused_gate_up.chunk(2)
            layer.gate_proj.weight.data, layer.up_proj.weight.data = gate, up
        # the tensors each layer's planned pass reads, gathered once (no module lookups)
        self.fused_layers = [
            (layer.input_norm.weight, layer.input_norm.eps, layer.fused_qkv, layer.fused_qkv_bias,
             layer.fused_qk_norm, layer.q_norm.eps if layer.q_norm is not None else 0.0,
             layer.q_norm is not None, layer.o_proj.weight, layer.post_norm.weight,
             layer.post_norm.eps, layer.fused_gate_up, layer.down_proj.weight)
            for layer in self.layers]

    fused_layers = None  # set by fuse_projections()

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(hidden))[..., : self.config.vocab_size]

    def rotary_tables(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [B, L, head_dim] of this model's rotary embedding at `positions` [B, L]."""
        cfg = self.config
        dtype = self.embed.weight.dtype
        return rotary(positions, cfg.head_dim, cfg.rope_theta, dtype, cfg.rope_scaling,
                      cfg.max_position_embeddings)

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor,
                attn_mask: torch.Tensor | None = None) -> torch.Tensor:
        """input_ids/positions [B, L]; attn_mask [B, 1, L, L] bool (True = may attend), None =
        the family's own pattern over `positions`. Returns logits [B, L, V] (no logit shift)."""
        cfg = self.config
        if attn_mask is None:
            blk = positions // cfg.block_size if cfg.block_causal else torch.zeros_like(positions)
            attn_mask = (blk[:, None, :, None] >= blk[:, None, None, :])
        x = self.embed(input_ids)  # [B, L, H]
        cos, sin = rotary(positions, cfg.head_dim, cfg.rope_theta, x.dtype, cfg.rope_scaling,
                          cfg.max_position_embeddings)
        for layer in self.layers:
            q, k, v = layer.qkv(layer.input_norm(x), cos, sin)
            attn = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=attn_mask,
                enable_gqa=cfg.num_heads != cfg.num_kv_heads)  # [B, Hq, L, D]
            x = x + layer.o_proj(attn.transpose(1, 2).flatten(2))
            x = x + layer.mlp(layer.post_norm(x))
        return self.logits(x)

    def rope_tables(self, device: torch.device, length: int = 0
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin [P, head_dim] of positions 0..P-1, P = max(max_position_embeddings,
        `length`) or more (rotate_half convention, in the weights' dtype), made once per device:
        the Triton path's rotary reads them by position, so a pass computes no table. The
        runner asks for its whole canvas up front (a context past the trained length)."""
        dtype = self.embed.weight.dtype
        key = (torch.device(device), dtype)
        tables = self._rope_tables.get(key)
        want = max(self.config.max_position_embeddings, length)
        if tables is None or tables[0].shape[0] < want:
            arange = torch.arange(want, device=device)
            cos, sin = self.rotary_tables(arange[None])
            tables = self._rope_tables[key] = (cos[0], sin[0])
        return tables

    def pass_geometry(self, positions: torch.Tensor, key_valid: torch.Tensor,
                      cache_lens: torch.Tensor, cache_len_max: int) -> AttnPlan:
        """The AttnPlan of one pass built for it alone (no runner plan: fixed-shape passes, the
        Triton backend): rotary tables and, on the torch backend, the attention mask over
        cat(cached keys, new keys); on the Triton backend the kernel takes the geometry."""
        if not uses_mask(positions.device):  # the kernels index the tables by position
            cos, sin = self.rope_tables(positions.device)
            return AttnPlan(cos, sin, None, kernel=True)
        cos, sin = self.rotary_tables(positions)
        half = cos.shape[-1] // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)
        cfg = self.config
        mask = attention_mask(positions, key_valid, cache_lens, cache_len_max,
                              cfg.block_size if cfg.block_causal else 0)
        return AttnPlan(cos[:, :, None], sin[:, :, None], mask)

    def forward_step(self, input_ids: torch.Tensor, positions: torch.Tensor,
                     key_valid: torch.Tensor, kv_cache: list[tuple[torch.Tensor, torch.Tensor]],
                     slots: torch.Tensor, cache_lens: torch.Tensor, cache_len_max: int,
                     write_pos: torch.Tensor | None, logits_start: int,
                     plan: AttnPlan | None = None,
                     select: torch.Tensor | None = None) -> torch.Tensor:
        """One denoising pass for a batch of requests: the one inference forward.

        input_ids/positions [B, L]: each row's new tokens (left-padded); key_valid [B, L]: which new
        tokens are keys (padding and tokens whose K/V is already cached are not); kv_cache: per
        layer (k, v) pools [S, Hkv, T+1, D] with position T the trash column; slots [B]: each row's
        pool slot; cache_lens [B]: valid cached positions per row (all earlier than any new token);
        cache_len_max: max(cache_lens) known on the host; write_pos [B, L]: pool position to write
        each new token's K/V (T = discard), None = write nothing; logits_start: compute logits for
        input positions [logits_start:] only. Returns logits [B, L - logits_start, V]; with
        `select` [B, K] (indices into those positions) only theirs, [B, K, V]: the last layer's
        attention and MLP and the head run for those rows alone.
        `plan` (engine.plan_types.AttnPlan): the rotary tables, attention mask and K/V layout of
        this geometry, built once by the runner's PlanCache and reused; None: built for this
        pass (`pass_geometry`). Fuses the projections on first use (Engine does it up front).
        """
        if self.fused_layers is None:
            self.fuse_projections()
        if plan is None:
            plan = self.pass_geometry(positions, key_valid, cache_lens, cache_len_max)
        cfg = self.config
        h, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        gqa = h != hkv
        cos, sin, mask = plan.cos, plan.sin, plan.mask
        x = F.embedding(input_ids, self.embed.weight)
        b, n, _ = x.shape
        width = (h + hkv) * d
        half = d // 2
        views = plan.views
        fp32 = x.dtype == torch.float32
        kernels = plan.kernel  # Triton: RMSNorm with its residual add, rotary, attention
        delta = None  # kernels: the last MLP output, not yet added to the residual stream x
        last = len(self.layers) - 1
        for i, (layer, (k_pool, v_pool)) in enumerate(zip(self.layers, kv_cache, strict=True)):
            (in_w, in_eps, qkv_w, qkv_b, qk_w, qk_eps, qk_norm, o_w, post_w, post_eps, gate_up_w,
             down_w) = self.fused_layers[i]
            if kernels:
                hx, res = rmsnorm(x if delta is None else delta, in_w, None if delta is None
                                  else x, in_eps, backend="triton")
                x = x if res is None else res
            else:
                hx = torch.rms_norm(x, x.shape[-1:], in_w, in_eps) if fp32 else \
                    layer.input_norm(x)
            qkv = F.linear(hx, qkv_w, qkv_b)
            qk = qkv[..., :width].view(b, n, h + hkv, d)
            v = qkv[..., width:].view(b, n, hkv, d)
            if qk_norm:
                if fp32:
                    qk = torch.rms_norm(qk, (d,), None, qk_eps) * qk_w
                else:
                    qk = torch.cat((layer.q_norm(qk[:, :, :h]), layer.k_norm(qk[:, :, h:])), 2)
            if kernels:  # one launch: [B, Hq + Hkv, L, D], rotated from the tables
                qk, _ = rotary_kernel(qk.transpose(1, 2), None, cos, sin, positions,
                                      backend="triton")
                q, k = qk[:, :h], qk[:, h:]
            else:
                qk = qk * cos + qk.roll(half, -1) * sin  # rotate_half with the sign in `sin`
                q = qk[:, :, :h].transpose(1, 2)  # [B, Hq, L, D]
            if views is not None:  # batch 1: store the new K/V, attend over the pool
                k_dst, v_dst, keys, values = views[i]
                off = plan.pool[3]
                k_dst.copy_(qk[0, off:, h:])
                v_dst.copy_(v[0, off:])
            elif plan.direct:
                keys, values = qk[:, :, h:].transpose(1, 2), v.transpose(1, 2)
            else:
                v = v.transpose(1, 2)  # [B, Hkv, L, D]
                if not kernels:
                    k = qk[:, :, h:].transpose(1, 2)
                    k_cached = k_pool[slots, :, :cache_len_max]  # gathered copies
                    v_cached = v_pool[slots, :, :cache_len_max]
                if write_pos is not None:  # in place: the pools are the persistent cache
                    rows = slots[:, None].expand_as(write_pos)
                    k_pool[rows, :, write_pos] = k.transpose(1, 2)
                    v_pool[rows, :, write_pos] = v.transpose(1, 2)
                if kernels:  # reads each row's slot of the pools (the writes lie past its cache)
                    attn = block_attention(q, k, v, k_pool[:, :, :cache_len_max],
                                           v_pool[:, :, :cache_len_max], cache_lens, positions,
                                           key_valid, cfg.block_size if cfg.block_causal else 0,
                                           slots=slots, backend="triton")
                else:
                    keys = torch.cat((k_cached, k), dim=2)
                    values = torch.cat((v_cached, v), dim=2)
            if i == last and (logits_start or select is not None) and not kernels:
                q, x = q[:, :, logits_start:], x[:, logits_start:]  # only the logit rows need
                mask = mask[..., logits_start:, :] if mask is not None else None  # the rest
                logits_start = 0  # (row-wise math)
                if select is not None:
                    q = q.take_along_dim(select[:, None, :, None], 2)
                    x = x.take_along_dim(select[:, :, None], 1)
                    mask = mask.take_along_dim(select[:, None, :, None], 2) \
                        if mask is not None else None
            if not kernels:
                attn = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask,
                                                      enable_gqa=gqa)
            out = F.linear(attn.transpose(1, 2).flatten(2), o_w)
            if kernels:
                hx, x = rmsnorm(out, post_w, x, post_eps, backend="triton")
            else:
                x = x + out
                hx = torch.rms_norm(x, x.shape[-1:], post_w, post_eps) if fp32 else \
                    layer.post_norm(x)
            gate, up = F.linear(hx, gate_up_w).chunk(2, -1)
            delta = F.linear(F.silu(gate) * up, down_w)
            if not kernels:
                x = x + delta
        if kernels:
            delta, x = delta[:, logits_start:], x[:, logits_start:]
            if select is not None:
                delta = delta.take_along_dim(select[:, :, None], 1)
                x = x.take_along_dim(select[:, :, None], 1)
            hidden, _ = rmsnorm(delta, self.norm.weight, x, cfg.rms_norm_eps, backend="triton")
        else:
            hidden = _norm(x[:, logits_start:], self.norm, cfg.rms_norm_eps)
        return F.linear(hidden, self.lm_head.weight)[..., : cfg.vocab_size]


def _norm(x: torch.Tensor, norm: RMSNorm, eps: float) -> torch.Tensor:
    if x.dtype == torch.float32:  # F.rms_norm without its Python wrapper
        return torch.rms_norm(x, x.shape[-1:], norm.weight, norm.eps)
    return norm(x)
