"""Fixed-shape denoising passes, captured once per shape as CUDA graphs and replayed.

Block-causal models only. Two kinds of pass qualify: decode-only passes, which write no K/V and
feed exactly block + shift tokens per row, and the fused commit passes of fast decoding, which
store the finished block's K/V and decode the next block in one pass (2 x block tokens per row;
`StaticForward.max_write_length`). A shape is (batch bucket, tokens per row, cache-length bucket,
logits start, whether it writes). The batch is padded to the next bucket (padding rows read slot
0's cache, see no keys of their own, write only the pools' trash column T, and their outputs are
dropped) and the visible cache to the next power of two (masked by cache_lens). Inputs are copied
*in place* into the static buffers the graph captured; the logits come back in the graph's own
output buffer, valid until the next replay. Prefill passes longer than a commit pass run eagerly.
Measured on an H200 before the commit passes were included: half of fast decoding's passes were
eager, and the engine spent 30% of its wall time on GPU kernels (docs/perf.md).

On CPU (`capture=False`) the same padded call runs eagerly: tests use that to show padding and
bucketing change no token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from diffvoice.engine.plan_types import cache_bucket


@dataclass
class _Static:
    ids: torch.Tensor  # [Bb, L]
    positions: torch.Tensor  # [Bb, L]
    key_valid: torch.Tensor  # [Bb, L]
    slots: torch.Tensor  # [Bb]
    cache_lens: torch.Tensor  # [Bb]
    write_pos: torch.Tensor | None = None  # [Bb, L] pool position per token (T = discard)
    out: torch.Tensor | None = None  # logits [Bb, W + shift, V], owned by the graph
    graph: object = None


class StaticForward:
    def __init__(self, model, kv_cache, buckets: tuple[int, ...], max_seq_len: int,
                 device: torch.device, capture: bool):
        self.model, self.kv = model, kv_cache
        self.buckets, self.max_seq_len = buckets, max_seq_len
        self.device, self.capture = device, capture
        self.shapes: dict[tuple[int, int, int, int, bool], _Static] = {}
        self.pool = torch.cuda.graph_pool_handle() if capture else None

    @staticmethod
    def max_write_length(window: int) -> int:
        """The longest pass that writes K/V and still runs on a fixed shape: a fused commit pass
        (the finished block and the next one), never a longer prefill."""
        return 2 * window

    def shape_for(self, batch: int, length: int, cache_len_max: int, logits_start: int,
                  writes: bool = False):
        bucket = next((b for b in self.buckets if b >= batch), None)
        if bucket is None:
            return None
        return bucket, length, cache_bucket(cache_len_max, self.max_seq_len), logits_start, writes

    def __call__(self, ids, positions, key_valid, slots, cache_lens, cache_len_max: int,
                 logits_start: int, write_pos: torch.Tensor | None = None
                 ) -> torch.Tensor | None:
        """Logits [B, L - logits_start, V], or None when no bucket fits (caller runs eager).
        `write_pos` [B, L]: where each token's K/V goes in its slot's pool (T = nowhere)."""
        b = ids.shape[0]
        key = self.shape_for(b, ids.shape[1], cache_len_max, logits_start, write_pos is not None)
        if key is None:
            return None
        st = self.shapes.get(key) or self._allocate(key)
        st.ids[:b].copy_(ids)  # in place: these buffers are what the graph reads
        st.positions[:b].copy_(positions)
        st.key_valid[:b].copy_(key_valid)
        st.slots[:b].copy_(slots)
        st.cache_lens[:b].copy_(cache_lens)
        st.key_valid[b:] = False
        st.cache_lens[b:] = 0
        if write_pos is not None:
            st.write_pos[:b].copy_(write_pos)
            st.write_pos[b:] = self.max_seq_len  # padding rows write the trash column
        if not self.capture:
            return self._forward(st, key)[:b]
        if st.graph is None:
            self._capture(st, key)
        st.graph.replay()
        return st.out[:b]

    def prepare(self, passes: list[tuple[int, int, bool]], max_batch: int, context: int
                ) -> list[tuple]:
        """Allocate (and on CUDA capture) each pass in `passes` — (tokens per row, logits start,
        writes) — for every batch bucket up to the one holding `max_batch` and every cache
        bucket up to `context` cached tokens, before any request: a shape first seen while
        serving costs its capture (about 1.5 s with Triton's compiles, measured on an H200) on
        that caller's pass. The buffers are zeros: no key is visible, and a writing pass writes
        only the pools' trash column. Returns the new keys."""
        buckets = [b for b in self.buckets if b < max_batch]
        buckets += [b for b in self.buckets if b >= max_batch][:1]
        new, cached = [], 16
        while True:
            for (length, logits_start, writes), bucket in [(p, b) for p in passes
                                                          for b in buckets]:
                key = self.shape_for(bucket, length, cached, logits_start, writes)
                if key is not None and key not in self.shapes:
                    st = self._allocate(key)
                    if self.capture:
                        self._capture(st, key)
                    else:
                        self._forward(st, key)
                    new.append(key)
            if cached >= min(context, self.max_seq_len):
                return new
            cached *= 2

    def _allocate(self, key) -> _Static:
        bucket, length, _, _, writes = key
        z = lambda dtype: torch.zeros((bucket, length), dtype=dtype, device=self.device)  # noqa: E731
        st = _Static(z(torch.long), z(torch.long), z(torch.bool),
                     torch.zeros(bucket, dtype=torch.long, device=self.device),
                     torch.zeros(bucket, dtype=torch.long, device=self.device),
                     z(torch.long).fill_(self.max_seq_len) if writes else None)
        self.shapes[key] = st
        return st

    def _forward(self, st: _Static, key) -> torch.Tensor:
        _, _, tc, logits_start, _ = key
        return self.model.forward_step(st.ids, st.positions, st.key_valid, self.kv, st.slots,
                                       st.cache_lens, tc, st.write_pos, logits_start)

    def _capture(self, st: _Static, key) -> None:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up (Triton autotune, allocator) off the capture
            for _ in range(2):
                self._forward(st, key)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            st.out = self._forward(st, key)
        st.graph = graph
