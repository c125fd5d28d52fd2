"""Train a receptionist block-diffusion LM from a fact sheet, on CPU, resumably.

`train(TrainConfig) -> dict` (a summary) writes into `out`:
  tokenizer.json, tokenizer_config.json   trained once, reused on resume
  config.json, model.safetensors          the exported checkpoint (engine.loader format), refreshed
                                          every `save_every_s` and at the end
  facts.yaml                              the fact sheet it was trained on
  train_state.pt                          model + optimizer + step + elapsed (resume point)
  train_log.jsonl, train_summary.json     loss / throughput log and final numbers
  paraphrase_bank.safetensors             the training questions' sentence embeddings, for
                                          paraphrase snapping at serving (agent.paraphrase)
  paraphrase_verified.json                the training questions the trained model answers as
                                          trained, which snapping prefers (agent.verify_bank)
Batch t is drawn from seeds (seed, t) only, so a resumed run sees the same data and masks as an
uninterrupted one. Knows nothing about the Engine or evaluation.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from diffvoice.agent.data import DataGenerator
from diffvoice.agent.facts import DEFAULT_FACTS_PATH, load_facts
from diffvoice.engine.config import ModelConfig
from diffvoice.engine.loader import save_checkpoint
from diffvoice.engine.model import DiffusionLM
from diffvoice.engine.tokenizer import ChatTokenizer
from diffvoice.engine.train.build_tokenizer import (
    EOS_TOKEN,
    MASK_TOKEN,
    extend_tokenizer,
    train_tokenizer,
)
from diffvoice.engine.train.objective import build_batch, scored_loss


@dataclass(frozen=True)
class TrainConfig:
    out: str
    facts: str = str(DEFAULT_FACTS_PATH)
    seed: int = 0
    max_steps: int = 3500
    time_budget_s: float | None = 1800.0  # the whole command: setup, loop, bank, verify
    stop_at_step: int | None = None
    batch_size: int = 32
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    vocab_size: int = 2048
    tokenizer_samples: int = 20000
    hidden_size: int = 256
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    intermediate_size: int = 768
    block_size: int = 8
    init_from: str | None = None
    use_chitchat: bool = True
    asr_cache: str = "auto"
    save_every_s: float = 300.0
    threads: int = 2
    export_dtype: str = "float32"
    resume: bool = True
    progress: bool = True
    verify_snaps: bool = True  # decode the training questions once at the end (~2 min)

    def __post_init__(self) -> None:
        positive = ("max_steps", "batch_size", "hidden_size", "num_layers", "num_heads",
                    "num_kv_heads", "head_dim", "intermediate_size", "block_size", "threads",
                    "tokenizer_samples")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.stop_at_step is not None and self.stop_at_step < 1:
            raise ValueError(f"stop_at_step must be >= 1 or None, got {self.stop_at_step}")
        if self.time_budget_s == 0:
            object.__setattr__(self, "time_budget_s", None)  # 0 = no time budget
        if self.time_budget_s is not None and self.time_budget_s < 0:
            raise ValueError(f"time_budget_s must be >= 0 (0 = none) or None, "
                             f"got {self.time_budget_s}")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0 <= self.min_lr_ratio <= 1:
            raise ValueError(f"min_lr_ratio must be in [0, 1], got {self.min_lr_ratio}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.save_every_s <= 0:
            raise ValueError(f"save_every_s must be > 0, got {self.save_every_s}")
        if self.export_dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"export_dtype must be float32/float16/bfloat16, "
                             f"got {self.export_dtype!r}")
        if self.init_from is not None and not (Path(self.init_from) / "config.json").is_file():
            raise ValueError(f"init_from must be a checkpoint directory, got {self.init_from!r}")
        if self.asr_cache not in ("auto", "none") and not Path(self.asr_cache).is_file():
            raise ValueError(f"asr_cache must be 'auto', 'none' or an existing JSONL file, "
                             f"got {self.asr_cache!r}")
        if self.vocab_size < 300:
            raise ValueError(f"vocab_size must be >= 300, got {self.vocab_size}")


def lr_factor(cfg: TrainConfig, step: int, elapsed_s: float,
              loop_budget_s: float | None = None) -> float:
    """Linear warmup, then cosine decay to min_lr_ratio. Progress is the step fraction, or the
    loop's time-budget fraction when that is further along (so a budget-cut run still decays).
    `loop_budget_s` is the training loop's share of the command's budget (default: all of it)."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.max_steps - cfg.warmup_steps)
    budget = loop_budget_s if loop_budget_s is not None else cfg.time_budget_s
    if budget:
        progress = max(progress, elapsed_s / budget)
    progress = min(1.0, progress)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def _tokenizer(cfg: TrainConfig, gen: DataGenerator, out: Path) -> ChatTokenizer:
    if cfg.init_from and not (cfg.resume and (out / "tokenizer.json").is_file()):
        extend_tokenizer(cfg.init_from, out)  # keep its ids so its embeddings stay meaningful
    elif not (cfg.resume and (out / "tokenizer.json").is_file()):
        rng = random.Random(f"{cfg.seed}-tokenizer")
        texts = []
        for _ in range(cfg.tokenizer_samples):
            ex = gen.sample_train(rng)
            texts += [" " + m["content"].lower().strip() if m["role"] == "user" else
                      " " + m["content"] if m["role"] == "tool" else (m["content"] or "")
                      for m in ex.messages()] + [ex.answer]
        texts += gen.all_answers()
        train_tokenizer(texts, out, vocab_size=cfg.vocab_size)
    return ChatTokenizer.from_dir(out)


def _asr_records(cfg: TrainConfig, facts) -> list[dict]:
    """The committed ASR transcripts (agent/train/asr_train.jsonl) were recognised from questions
    about the default business; "auto" uses them only for a fact sheet with that business name."""
    from diffvoice.agent.facts import load_facts as _load
    from diffvoice.agent.train.asr_augment import TRAIN_CACHE, load_cache

    if cfg.asr_cache == "none":
        return []
    if cfg.asr_cache == "auto":
        return load_cache(TRAIN_CACHE) if facts.name == _load().name else []
    return load_cache(cfg.asr_cache)


def model_config(cfg: TrainConfig, tok: ChatTokenizer) -> ModelConfig:
    return ModelConfig(
        family="sdar", vocab_size=tok.tokenizer.get_vocab_size(), hidden_size=cfg.hidden_size,
        num_layers=cfg.num_layers, num_heads=cfg.num_heads, num_kv_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, intermediate_size=cfg.intermediate_size, rope_theta=10000.0,
        rms_norm_eps=1e-6, tie_word_embeddings=True, block_size=cfg.block_size,
        mask_token_id=tok.token_id(MASK_TOKEN), eos_token_ids=(tok.token_id(EOS_TOKEN),),
        max_position_embeddings=1024)


class BatchMaker:
    """Step t -> the same Batch every time (data and masks seeded from (seed, t))."""

    def __init__(self, cfg: TrainConfig, gen: DataGenerator, tok: ChatTokenizer,
                 mcfg: ModelConfig):
        self.cfg, self.gen, self.tok, self.mcfg = cfg, gen, tok, mcfg
        self.eos_id = mcfg.eos_token_ids[0]
        self._prompt_cache: dict[str, list[int]] = {}
        self._answer_cache: dict[str, list[int]] = {}

    def encode(self, example) -> tuple[list[int], list[int]]:
        """An Example -> (prompt ids through the chat template, reply ids + EOS)."""
        answer = example.answer
        single = not example.history and not example.after
        prompt = self._prompt_cache.get(example.question) if single else None
        if prompt is None:
            prompt = self.tok.encode_chat(example.messages())
            if single and len(self._prompt_cache) < 200_000:
                self._prompt_cache[example.question] = prompt
        reply = self._answer_cache.get(answer)
        if reply is None:
            reply = self._answer_cache[answer] = self.tok.encode(answer) + [self.eos_id]
        return prompt, reply

    def __call__(self, step: int, batch_size: int | None = None):
        rng = random.Random(f"{self.cfg.seed}-{step}")
        pairs = [self.encode(e) for e in
                 (self.gen.sample_train(rng) for _ in range(batch_size or self.cfg.batch_size))]
        generator = torch.Generator().manual_seed(self.cfg.seed * 1_000_003 + step)
        return build_batch([p for p, _ in pairs], [r for _, r in pairs], self.mcfg.block_size,
                           self.mcfg.mask_token_id, self.eos_id, generator)


def setup(cfg: TrainConfig):
    """Facts, generator, tokenizer, model config and a freshly initialised model."""
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    facts = load_facts(cfg.facts)
    gen = DataGenerator(facts, use_chitchat=cfg.use_chitchat, asr_cache=_asr_records(cfg, facts))
    tok = _tokenizer(cfg, gen, out)
    mcfg = model_config(cfg, tok)
    torch.manual_seed(cfg.seed)
    model = DiffusionLM(mcfg)
    model.init_weights(std=0.02, generator=torch.Generator().manual_seed(cfg.seed))
    if cfg.init_from:
        warm_start(model, cfg.init_from)
    return gen, tok, mcfg, model


def warm_start(model: DiffusionLM, path: str) -> None:
    """Copy every weight of the checkpoint at `path` into `model`; a grown vocabulary keeps the
    old rows (same ids: extend_tokenizer) and its new rows start at the mean old embedding."""
    from diffvoice.engine.loader import load_checkpoint

    old = load_checkpoint(path, dtype="float32", device="cpu").model.state_dict()
    with torch.no_grad():
        for name, param in model.state_dict().items():
            src = old.get(name)
            if src is None:
                raise ValueError(f"init_from {path}: no tensor {name!r} (different architecture)")
            if src.shape == param.shape:
                param.copy_(src)
            elif src.shape[1:] == param.shape[1:] and src.shape[0] < param.shape[0]:
                param[: src.shape[0]] = src
                param[src.shape[0]:] = src.mean(0)
            else:
                raise ValueError(f"init_from {path}: {name} has shape {tuple(src.shape)}, "
                                 f"the model {tuple(param.shape)}")


def export(model: DiffusionLM, cfg: TrainConfig, out: Path) -> None:
    save_checkpoint(model, out, tokenizer_dir=out, dtype=cfg.export_dtype)
    # a receptionist is trained and evaluated with the engine's own decoding: it asks for it by
    # default (SamplingParams(decoding=None), engine.loader.read_default_decoding)
    gen_file = out / "generation_config.json"
    gen = json.loads(gen_file.read_text()) if gen_file.is_file() else {}
    gen_file.write_text(json.dumps({**gen, "decoding": "fast"}, indent=2) + "\n")
    if Path(cfg.facts).resolve() != (out / "facts.yaml").resolve():
        shutil.copy(cfg.facts, out / "facts.yaml")


def say(message: str) -> None:
    """A progress line on stderr, with or without the progress bar (stdout ends with the
    summary's JSON)."""
    print(f"diffvoice train: {message}", file=sys.stderr, flush=True)


def tail_reserve_s(cfg: TrainConfig, gen: DataGenerator) -> float:
    """Seconds the steps after the training loop are given out of the command's budget: the
    paraphrase bank at this machine's measured embedding rate (a 32-question sample, the
    encoder then stays loaded for the bank), plus verification's share (a tenth of the budget,
    at least 60 s; verification stops at the budget's end and records what it did not decode
    as unverified)."""
    reserve = 0.0
    try:
        from diffvoice.agent.paraphrase import Encoder
        from diffvoice.agent.paraphrase_bank import bank_entries

        texts = [e.text for e in bank_entries(gen)]
        started = time.perf_counter()
        encoder = Encoder.shared()
        loaded = time.perf_counter()
        encoder.encode(texts[:32])
        per_text = (time.perf_counter() - loaded) / max(1, min(32, len(texts)))
        reserve += (loaded - started) + 1.5 * per_text * len(texts)  # 1.5: the machine may slow
    except ImportError:
        pass
    if cfg.verify_snaps:
        reserve += max(60.0, 0.1 * (cfg.time_budget_s or 0.0))
    return reserve


def _paraphrase_bank(out: Path) -> str | None:
    """Embed the fact sheet's training questions for paraphrase snapping (stored next to the
    model; ~25 s for a new fact sheet); None when the encoder package is not installed."""
    try:
        from diffvoice.agent.paraphrase import BANK_FILE, ParaphraseSnap
    except ImportError:
        return None
    try:
        ParaphraseSnap.for_model(out)
    except ImportError:
        return None
    return str(out / BANK_FILE)


def _verify_snaps(out: Path, threads: int, deadline: float | None = None) -> str | None:
    """Record which training questions the trained model answers as trained (~2 min on this
    project's CPU for the default fact sheet); None without a paraphrase bank. Questions not
    decoded by `deadline` (time.monotonic()) are recorded as not verified."""
    from diffvoice.agent.train.verify_bank import VERIFIED_FILE, verify

    verify(out, threads=threads, deadline=deadline, progress=say)
    return str(out / VERIFIED_FILE)


def train(cfg: TrainConfig) -> dict:
    """Train; with `cfg.time_budget_s` the whole command (setup, loop, bank, verification)
    ends within the budget: the loop gets what setup and `tail_reserve_s` leave."""
    command_start = time.monotonic()
    torch.set_num_threads(cfg.threads)
    out = Path(cfg.out)
    say("setting up (training data, tokenizer, model)")
    gen, tok, mcfg, model = setup(cfg)
    loop_budget = None
    if cfg.time_budget_s:
        reserve = tail_reserve_s(cfg, gen)
        setup_s = time.monotonic() - command_start
        loop_budget = max(0.0, cfg.time_budget_s - setup_s - reserve)
        say(f"time budget {cfg.time_budget_s:.0f} s: setup took {setup_s:.0f} s, the training "
            f"loop gets {loop_budget:.0f} s, {reserve:.0f} s are kept for the paraphrase bank "
            "and verification")
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=cfg.lr, betas=(0.9, 0.98), eps=1e-8)
    state_file = out / "train_state.pt"
    step, elapsed, tokens_seen = 0, 0.0, 0
    if cfg.resume and state_file.is_file():
        state = torch.load(state_file, weights_only=False)
        saved = {"rope_scaling": None, **state["model_config"]}  # states from before that field
        if saved != asdict(mcfg):
            raise ValueError(f"{state_file}: saved with a different model config; "
                             f"use a new --out or --no-resume")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, elapsed, tokens_seen = state["step"], state["elapsed_s"], state["tokens_seen"]
    make_batch = BatchMaker(cfg, gen, tok, mcfg)
    n_params = sum(p.numel() for p in model.parameters())
    log = (out / "train_log.jsonl").open("a")

    def save() -> None:
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step,
                    "elapsed_s": elapsed, "tokens_seen": tokens_seen,
                    "model_config": asdict(mcfg), "train_config": asdict(cfg)},
                   state_file.with_suffix(".tmp"))
        state_file.with_suffix(".tmp").replace(state_file)
        export(model, cfg, out)

    bar = tqdm(total=cfg.max_steps, initial=step, disable=not cfg.progress, unit="step",
               dynamic_ncols=True)
    start = time.perf_counter() - elapsed
    last_save = time.perf_counter()
    window_tokens, window_start, loss_ema = 0, time.perf_counter(), None
    last_step = min(cfg.max_steps, cfg.stop_at_step or cfg.max_steps)
    say(f"training: up to {last_step} steps" + (f" or {loop_budget:.0f} s" if loop_budget else "")
        + ("" if cfg.progress else " (a line a minute)"))
    last_line = time.perf_counter()
    while step < last_step and not (loop_budget is not None and elapsed >= loop_budget):
        factor = lr_factor(cfg, step, elapsed, loop_budget)
        for group in opt.param_groups:
            group["lr"] = cfg.lr * factor
        batch = make_batch(step)
        loss = scored_loss(model, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        step += 1
        tokens_seen += batch.num_tokens
        window_tokens += batch.num_tokens
        loss_value = float(loss.detach())
        loss_ema = loss_value if loss_ema is None else 0.95 * loss_ema + 0.05 * loss_value
        now = time.perf_counter()
        elapsed = now - start
        tokens_per_s = window_tokens / max(1e-9, now - window_start)
        bar.update(1)
        bar.set_postfix(loss=f"{loss_ema:.3f}", tok_s=f"{tokens_per_s:.0f}",
                        lr=f"{cfg.lr * factor:.1e}")
        if step % 20 == 0:
            log.write(json.dumps({"step": step, "loss": round(loss_value, 4),
                                  "loss_ema": round(loss_ema, 4), "lr": cfg.lr * factor,
                                  "tokens_per_s": round(tokens_per_s, 1),
                                  "elapsed_s": round(elapsed, 1)}) + "\n")
            log.flush()
            window_tokens, window_start = 0, now
        if now - last_save >= cfg.save_every_s:
            save()
            last_save = time.perf_counter()
        if not cfg.progress and now - last_line >= 60.0:
            say(f"step {step}/{last_step}, loss {loss_ema:.3f}, {tokens_per_s:.0f} tok/s, "
                f"{elapsed:.0f} s")
            last_line = now
    bar.close()
    save()
    log.close()
    say(f"trained {step} steps in {elapsed:.0f} s; embedding the paraphrase bank")
    started = time.monotonic()
    bank = _paraphrase_bank(out)
    say(f"paraphrase bank done in {time.monotonic() - started:.0f} s")
    deadline = command_start + cfg.time_budget_s if cfg.time_budget_s else None
    verified = _verify_snaps(out, cfg.threads, deadline) if bank and cfg.verify_snaps else None
    summary = {"steps": step, "elapsed_s": round(elapsed, 1), "tokens_seen": tokens_seen,
               "tokens_per_s": round(tokens_seen / max(elapsed, 1e-9), 1),
               "final_loss_ema": None if loss_ema is None else round(loss_ema, 4),
               "parameters": n_params, "threads": cfg.threads,
               "paraphrase_bank": bank, "paraphrase_verified": verified,
               "model_config": asdict(mcfg), "train_config": asdict(cfg)}
    (out / "train_summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary
