"""Per-request generation knobs and per-process engine settings.

Each dataclass validates itself and raises ValueError naming the field. Knows nothing about
tensors, tokenizers or the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field

POLICIES = ("low_confidence", "threshold", "entropy", "sdar_static", "sdar_dynamic",
            "threshold_ge", "dream_topk", "dream_entropy")
DECODINGS = ("reference", "fast")
MAX_SEED = 2**63  # torch.Generator.manual_seed takes a signed 64-bit value


def _short(value: object, limit: int = 40) -> str:
    """repr() of a field value, cut to `limit` chars (a huge int must not flood the message)."""
    try:
        text = repr(value)
    except ValueError:  # an int too long to print (sys.int_info.str_digits_check_threshold)
        return f"<{type(value).__name__} too long to print>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


@dataclass(frozen=True)
class SamplingParams:
    """The reasoning dial: more denoising passes buy accuracy, fewer buy speed.

    policy:          None (the default) = the family's own rule under `decoding` (engine.decoding);
                     "low_confidence" (LLaDA: fixed `steps_per_block` passes per block),
                     "threshold" (Fast-dLLM: commit every slot with p > `threshold`, >= 1 a pass),
                     "entropy" (EB-sampler: commit lowest-entropy slots while their summed
                     entropy stays <= `entropy_bound`, >= 1 a pass).
                     The families' own rules ("sdar_static", "sdar_dynamic", "threshold_ge",
                     "dream_topk", "dream_entropy") may also be named directly.
    threshold:       tau of the threshold rules; None = the family's default (SDAR 0.85, else 0.9).
    block_size:      decoding block; None takes the family's (block-causal: the model's; LLaDA
                     32; Dream the whole answer). Block-causal models accept a divisor of their
                     trained block (sub-blocks decoded in order inside it).
    temperature:     0 = greedy; > 0 samples with Gumbel noise drawn from `seed`.
    ignore_eos:      keep generating to max_new_tokens (benchmarks at equal answer length).
    decoding:        "reference" = decode as the family's authors' code does;
                     "fast" = the engine's departures (see engine.decoding; with policy None,
                     low_confidence for every family);
                     None (the default) = the model's own: the `decoding` its checkpoint's
                     generation_config.json names (diffvoice's receptionists: "fast", what they
                     are trained and evaluated with), else "reference".
    """

    max_new_tokens: int = 64
    policy: str | None = None
    steps_per_block: int = 4
    threshold: float | None = None
    entropy_bound: float = 0.5
    block_size: int | None = None
    temperature: float = 0.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    # schema-constrained decoding (engine/constrained/, docs/tool-calling.md): OpenAI-shaped
    # function tools, tool_choice ("none" / "auto" / "required" / {"type": "function", ...}) and
    # response_format ({"type": "json_schema", "json_schema": {"schema": {...}}}); validated
    # in depth by the engine when the request is prepared.
    tools: tuple[dict, ...] = ()
    tool_choice: str | dict | None = None
    response_format: dict | None = None
    decoding: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(
                f"max_new_tokens must be a positive integer, got {self.max_new_tokens!r}")
        if self.policy is not None and self.policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES}, got {self.policy!r}")
        if not isinstance(self.steps_per_block, int) or self.steps_per_block < 1:
            raise ValueError(f"steps_per_block must be >= 1, got {self.steps_per_block!r}")
        if self.threshold is not None and not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold!r}")
        if self.decoding is not None and self.decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {DECODINGS}, got {self.decoding!r}")
        if self.entropy_bound < 0.0:
            raise ValueError(f"entropy_bound must be >= 0, got {self.entropy_bound!r}")
        if self.block_size is not None and (not isinstance(self.block_size, int)
                                            or self.block_size < 1):
            raise ValueError(
                f"block_size must be a positive integer or None, got {self.block_size!r}")
        if self.temperature < 0.0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if self.seed is not None and (not isinstance(self.seed, int) or isinstance(self.seed, bool)
                                      or not 0 <= self.seed < MAX_SEED):
            raise ValueError(f"seed must be an integer in [0, 2**63) or None, got "
                             f"{_short(self.seed)}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"stop must be a sequence of non-empty strings, got {self.stop!r}")
        if isinstance(self.tools, list):
            object.__setattr__(self, "tools", tuple(self.tools))
        if not isinstance(self.tools, tuple) or not all(isinstance(t, dict) for t in self.tools):
            raise ValueError(f"tools must be a sequence of tool objects, got {self.tools!r}")
        if self.tool_choice is not None and not isinstance(self.tool_choice, str | dict):
            raise ValueError(f"tool_choice must be a string or an object, got {self.tool_choice!r}")
        if self.response_format is not None and not isinstance(self.response_format, dict):
            raise ValueError(f"response_format must be an object, got {self.response_format!r}")


@dataclass(frozen=True)
class EngineConfig:
    """Process-wide settings for one Engine.

    max_running:  requests decoded concurrently (KV-cache slots; also the largest batch).
    max_queued:   requests waiting for a slot; one more is rejected with EngineOverloaded.
    max_seq_len:  prompt + answer tokens a slot holds (None: the model's limit, capped at 4096).
    prefix_cache: approximate prefix cache for full-bidirectional models (Fast-dLLM v1); the
                  exact block cache of block-causal models is always on.
    batch_buckets: batch sizes are padded up to the next bucket (CUDA-graph friendly).
    enforce_eager: never capture CUDA graphs (always true on CPU).
    static_shapes: pad decode-only passes to the graph buckets even without CUDA graphs (what the
                  graph path does, runnable on CPU; a testing aid).
    max_prompt_chars: what one request's messages may cost, in characters (every string of
                  every message at any depth, tool_call arguments and names included, plus 32
                  per message: engine.requests.prompt_chars); costlier prompts are refused
                  (ValueError) before the chat template or tokenizer touch them.
    prepare_budget_s: CPU seconds (of the preparing thread; 10x that in wall time) one request's
                  preparation may take on the prepare pool (a schema compile of tools /
                  response_format); past it the request is refused (ValueError), as it is once
                  its caller goes away. A backstop: inputs are bounded first, and a compile's
                  work by a count (engine.constrained.limits.MAX_TOKENIZATIONS, ~0.3 s at most
                  on a 2-core CPU), so a legitimate request takes milliseconds to a few tenths.
    max_drafts:   low-priority draft requests (`generate(..., draft=True)`) in flight at once;
                  one more is refused (DraftRefused). 0 turns drafts off.
    drafts_share_passes: let drafts ride in passes that also carry real requests (cheap on a
                  GPU, where a pass costs about the same for 1 or 8 rows); off by default, so on
                  a CPU a draft pauses whenever a real request is decoding.
    reserved_slots: slots that only priority-0 requests may take (`generate(...,
                  priority=0)`, the default): a request of priority > 0 is admitted only while
                  more than this many slots are free, and refused (PriorityRefused) once
                  priority > 0 requests hold all but these slots and a quarter of max_queued,
                  so low-priority traffic can never hold every slot or queue place a
                  priority-0 request needs. At most max_running - 1 take effect; 0 reserves
                  nothing.
    priority_share_passes: let rows of a lower priority (a higher number) ride in passes that
                  carry rows of a better one; off by default: as drafts do, they pause while
                  better rows decode (and a block step of them yields to a better request that
                  arrives), so a priority-0 row's pass costs what it costs alone.
    warmup_graph_context: `Engine.warmup()` captures the decode pass's CUDA graph for every
                  batch bucket up to max_running and every cache bucket up to this many cached
                  tokens (at the default decode block), so no caller's pass pays a capture
                  (~1.5 s each on an H200, Triton compiles included); 0 = capture on first sight
                  only. With static_shapes on CPU the same shapes are laid out and run once.
    block_step_passes: the most denoising passes the worker runs back to back before it reads
                  the device (engine.block_step: a decode block's passes, one read at its end);
                  1 = a read after every pass.
    overlap:      queue a block step before the previous one is read, where the rows' next
                  blocks are known without it (fixed schedules: engine.block_step.sure_done), so
                  the host plans and queues step n+1 while the device runs step n; a row that
                  ended at an EOS in step n runs step n+1 for nothing (Engine.late_row_passes).
                  None = on a CUDA device only: on a CPU the "device" is the worker thread
                  itself, so nothing overlaps and each block would reach its caller one step
                  later.
    predict_masked: predict only the window slots a pass may commit (their maskable slots, as
                  many as the row with the most, found on the device; the host bounds the count
                  from the policies' schedules: engine.block_step.masks_bound): the last layer's
                  attention and MLP, the head and the softmax run for those rows alone. For
                  greedy fast-decoding rows on the eager path (not sampled, schema-constrained
                  or reference-decoded rows, nor a fixed-shape / CUDA-graph pass: those predict
                  the whole window), in batches of 2 rows or more (runner.MASKED_MIN_BATCH: a
                  lone row gains nothing, docs/perf.md). Off: every pass predicts the whole
                  window.
    worker_threads: torch's intra-op threads on the engine's worker thread (torch.set_num_threads
                  there; it is per thread). None = 1 on a CPU device, where a second OpenMP team
                  beside the main thread's made every small op 16-19x slower on the 2-core
                  development machine (docs/perf.md), and torch's default elsewhere; 0 = leave
                  torch's default. One thread suits the small models a CPU serves (their passes
                  are many small ops); a large model on a many-core CPU may want more (a 512x512
                  matmul ran 1.5x faster with 2 threads on a non-main thread there).
    """

    device: str = "auto"
    dtype: str = "auto"
    max_running: int = 16
    max_queued: int = 64
    max_seq_len: int | None = None
    prefix_cache: bool = True
    batch_buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    enforce_eager: bool = False
    static_shapes: bool = False
    kernels: str = "auto"
    default_params: SamplingParams = field(default_factory=SamplingParams)
    # characters of message text a request may carry, checked before templating/tokenising
    max_prompt_chars: int = 65536
    prepare_budget_s: float = 2.0
    max_drafts: int = 8
    drafts_share_passes: bool = False
    reserved_slots: int = 2
    priority_share_passes: bool = False
    warmup_graph_context: int = 512
    block_step_passes: int = 16
    worker_threads: int | None = None
    overlap: bool | None = None
    predict_masked: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.max_drafts, int) or self.max_drafts < 0:
            raise ValueError(f"max_drafts must be an integer >= 0, got {self.max_drafts!r}")
        if not isinstance(self.reserved_slots, int) or self.reserved_slots < 0:
            raise ValueError(f"reserved_slots must be an integer >= 0, "
                             f"got {self.reserved_slots!r}")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype must be auto/float32/bfloat16/float16, got {self.dtype!r}")
        if self.max_running < 1:
            raise ValueError(f"max_running must be >= 1, got {self.max_running}")
        if not isinstance(self.warmup_graph_context, int) or self.warmup_graph_context < 0:
            raise ValueError("warmup_graph_context must be an integer >= 0, "
                             f"got {self.warmup_graph_context!r}")
        if not isinstance(self.block_step_passes, int) or self.block_step_passes < 1:
            raise ValueError(f"block_step_passes must be an integer >= 1, "
                             f"got {self.block_step_passes!r}")
        if self.overlap is not None and not isinstance(self.overlap, bool):
            raise ValueError(f"overlap must be None, True or False, got {self.overlap!r}")
        if self.worker_threads is not None and (not isinstance(self.worker_threads, int)
                                                or self.worker_threads < 0):
            raise ValueError(f"worker_threads must be None or an integer >= 0, "
                             f"got {self.worker_threads!r}")
        if self.max_queued < 0:
            raise ValueError(f"max_queued must be >= 0, got {self.max_queued}")
        if self.max_seq_len is not None and self.max_seq_len < 16:
            raise ValueError(f"max_seq_len must be >= 16, got {self.max_seq_len}")
        if self.kernels not in ("auto", "triton", "torch"):
            raise ValueError(f"kernels must be auto/triton/torch, got {self.kernels!r}")
        if not isinstance(self.prepare_budget_s, int | float) or not self.prepare_budget_s > 0:
            raise ValueError(f"prepare_budget_s must be > 0, got {self.prepare_budget_s!r}")
        if not isinstance(self.max_prompt_chars, int) or self.max_prompt_chars < 1:
            raise ValueError(f"max_prompt_chars must be >= 1, got {self.max_prompt_chars!r}")
        if not self.batch_buckets or list(self.batch_buckets) != sorted(set(self.batch_buckets)):
            raise ValueError(f"batch_buckets must be strictly increasing, got {self.batch_buckets}")
