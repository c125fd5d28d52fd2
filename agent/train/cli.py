"""`diffvoice train` and `diffvoice eval-model`: the receptionist model from a terminal.

  diffvoice train --facts FILE.yaml --out DIR     flags map 1:1 onto trainer.TrainConfig; running
                                                  again with the same --out resumes
  diffvoice eval-model [--model DIR]              held-out fact accuracy, EOS rate, reply length
                                                  and latency through the real Engine; booking
                                                  by free decoding and through the constrained
                                                  tools path (--paths), closed-loop calls
Registered in engine/cli.py as (add_train_arguments, run_train) and (add_eval_arguments,
run_eval). Knows nothing about the training loop beyond TrainConfig/train and evaluate().
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from diffvoice.agent.clarify import DEFAULT_THRESHOLD
from diffvoice.agent.paraphrase import DEFAULT_THRESHOLD as PARAPHRASE_THRESHOLD
from diffvoice.agent.paraphrase import INTENT_THRESHOLD
from diffvoice.agent.train.asking import RULES
from diffvoice.agent.train.evaluate import (
    DEFAULT_PATHS,
    DEFAULT_SETTINGS,
    PATHS,
    evaluate,
    markdown_table,
)
from diffvoice.agent.train.trainer import TrainConfig, train

_HELP = {
    "out": "output directory: the checkpoint (config.json, model.safetensors, tokenizer files, "
           "facts.yaml) plus train_state.pt for resuming",
    "facts": "fact sheet YAML (see agent/default_facts.yaml for the schema)",
    "seed": "seed for data, masks and initialisation",
    "max_steps": "optimizer steps (the learning-rate schedule spans them, unless the time budget "
                 "ends the run first)",
    "time_budget_s": "the whole command ends within this many seconds: the training loop gets "
                     "what setup, the paraphrase bank and verification leave, and its "
                     "learning-rate schedule decays by then too, so a busy machine gets fewer "
                     "steps, not an undecayed model (0 = no budget: exactly --max-steps, for a "
                     "reproducible run)",
    "stop_at_step": "pause after this step (schedule unchanged); run again to resume",
    "batch_size": "examples per step",
    "lr": "peak learning rate (AdamW)",
    "min_lr_ratio": "final learning rate as a fraction of --lr (cosine decay)",
    "warmup_steps": "linear warmup steps",
    "weight_decay": "AdamW weight decay on matrices",
    "grad_clip": "gradient-norm clip",
    "vocab_size": "BPE vocabulary size upper bound (specials included)",
    "tokenizer_samples": "generated examples the BPE is trained on",
    "hidden_size": "model width",
    "num_layers": "transformer layers",
    "num_heads": "attention heads",
    "num_kv_heads": "key/value heads (grouped-query attention)",
    "head_dim": "per-head dimension",
    "intermediate_size": "MLP width",
    "block_size": "diffusion block size (the engine decodes this many tokens per block)",
    "init_from": "start from this checkpoint's weights (its tokenizer is extended, not retrained; "
                 "same architecture flags needed)",
    "use_chitchat": "add real chit-chat lines (chitchat-dataset package, a dependency) as "
                    "out-of-scope inputs",
    "asr_cache": "recognised-speech training questions: 'auto' (the committed cache, used when "
                 "the fact sheet's business is the default one), 'none', or a JSONL path",
    "save_every_s": "export the checkpoint and resume state this often (seconds)",
    "threads": "torch CPU threads",
    "export_dtype": "dtype of model.safetensors",
    "resume": "resume from OUT/train_state.pt when present",
    "progress": "show a progress bar (without it: a line a minute on stderr)",
    "verify_snaps": "at the end, decode every training question once and record those the model "
                    "answers as trained (paraphrase_verified.json, ~2 min): paraphrase snapping "
                    "prefers them (agent.verify_bank)",
}


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        if f.type in (bool, "bool"):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                                help=_HELP[f.name])
            continue
        kind = {"int": int, "float": float, "str": str}.get(str(f.type).split(" ")[0], None)
        if f.name == "time_budget_s":
            kind = float
        elif f.name == "stop_at_step":
            kind = int
        required = default is dataclasses.MISSING
        parser.add_argument(flag, type=kind or str, default=None if required else default,
                            required=required, help=_HELP[f.name] + (
                                "" if required or default is None else f" (default {default})"))


def run_train(args: argparse.Namespace) -> int:
    try:
        fields = dataclasses.fields(TrainConfig)
        cfg = TrainConfig(**{f.name: getattr(args, f.name) for f in fields})
        summary = train(cfg)
    except (ValueError, FileNotFoundError) as exc:
        print(f"diffvoice train: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: v for k, v in summary.items() if k not in ("train_config",
                                                                    "model_config")}, indent=2))
    print(training_summary(summary, cfg))
    return 0


def training_summary(summary: dict, cfg: TrainConfig) -> str:
    """The human-readable end of a training run: what happened, where the model is, what next."""
    minutes = summary["elapsed_s"] / 60
    stopped = ("the time budget" if cfg.time_budget_s and summary["elapsed_s"] >= cfg.time_budget_s
               else f"step {summary['steps']}")
    return (f"\ntrained {summary['steps']} steps in {minutes:.1f} min (stopped at {stopped}), "
            f"final loss {summary['final_loss_ema']}, {summary['tokens_per_s']:.0f} tokens/s\n"
            f"model: {Path(cfg.out).resolve()} (config.json, model.safetensors, tokenizer, "
            f"facts.yaml{', paraphrase bank' if summary.get('paraphrase_bank') else ''}"
            f"{', verified questions' if summary.get('paraphrase_verified') else ''})\n"
            f"evaluate: diffvoice eval-model --model {cfg.out}\n"
            f"try it:   diffvoice chat --model {cfg.out}\n"
            f"serve it: diffvoice serve --model {cfg.out}")


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    from diffvoice.engine import DEFAULT_MODEL_DIR

    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR,
                        help="checkpoint directory (default: the shipped receptionist model)")
    parser.add_argument("--facts", type=Path, default=None,
                        help="fact sheet of the held-out questions (default MODEL/facts.yaml)")
    parser.add_argument("--settings", nargs="+", default=list(DEFAULT_SETTINGS),
                        help="decoding settings: low_confidence:STEPS_PER_BLOCK, threshold:P, "
                             "entropy:GAMMA, each optionally @fast or @reference (the "
                             "decoding; default: the model's own, fast for receptionists; "
                             "constrained tool rows always decode fast)")
    parser.add_argument("--per-template", type=int, default=1,
                        help="renderings of each held-out template per slot value")
    parser.add_argument("--limit", type=int, default=None,
                        help="evaluate an evenly spaced subset of this many questions")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="reply token budget")
    parser.add_argument("--concurrency", type=int, default=1,
                        help="requests in flight (1 = latency per reply, not per batch)")
    parser.add_argument("--seed", type=int, default=1234, help="seed of the held-out renderings")
    parser.add_argument("--chitchat", action=argparse.BooleanOptionalAction, default=True,
                        help="include held-out chitchat-dataset lines as out-of-scope questions "
                             "(when that package is installed)")
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--dialogues", type=int, default=240,
                        help="held-out booking / tool / follow-up turns to generate")
    parser.add_argument("--independent", action=argparse.BooleanOptionalAction, default=True,
                        help="also ask the hand-written independent set, as text and as "
                             "recognised speech (default fact sheet only)")
    parser.add_argument("--clarify-below", type=float, default=DEFAULT_THRESHOLD,
                        help="ask a clarifying question when the first block's lowest committed "
                             "confidence is below this (0 = only for replies that are not "
                             "well-formed)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(DEFAULT_PATHS),
                        help="decoding paths: free (no tools: the raw figure), tools (the "
                             "receptionist's tools with tool_choice auto, constrained calls "
                             "and conversation-narrowed slots: what serve and the API do), "
                             "tools-schema (the same without the conversation narrowing)")
    parser.add_argument("--episodes", type=int, default=60,
                        help="closed-loop booking calls per path (a scripted caller answers "
                             "the model's own slot-filling questions; 0 = none)")
    parser.add_argument("--paraphrase", type=float, default=PARAPHRASE_THRESHOLD,
                        metavar="SIMILARITY",
                        help="paraphrase snapping as served: a caller's first message at least "
                             "this cosine-similar (all-MiniLM-L6-v2) to a training question "
                             "with a fact / small-talk answer is asked as that question "
                             "(agent.paraphrase; default %(default)s; 1.01 = off)")
    parser.add_argument("--intent-snap", type=float, default=INTENT_THRESHOLD,
                        metavar="PROBABILITY",
                        help="intent snapping as served (with --paraphrase): a first message "
                             "whose intent the intent head gives at least this probability is "
                             "asked as the most similar training question of that intent with "
                             "the same service and day; a later turn stating no value as the "
                             "training follow-up of its intent (default %(default)s; 1.01 = off)")
    parser.add_argument("--grounding", action=argparse.BooleanOptionalAction, default=True,
                        help="mend a booking-flow reply that restates a time or day nobody "
                             "said, as served (agent.grounding)")
    parser.add_argument("--retry", action=argparse.BooleanOptionalAction, default=True,
                        help="decode a reply that is not well-formed once more, one token per "
                             "pass, and keep it when it agrees, as served (agent.clarify)")
    parser.add_argument("--without", nargs="+", default=[], choices=RULES, metavar="RULE",
                        help="leave these of the agent's rules out (agent.pipeline; an "
                             f"ablation): {', '.join(RULES)}")
    parser.add_argument("--sets", nargs="+", default=[], metavar="SET",
                        help="only these question sets (names as in the report, e.g. template "
                             "dialogue independent spoken-kokoro:whisper-tiny.en; default: all)")
    parser.add_argument("--out", type=Path, default=None, help="write the full JSON report here")


def run_eval(args: argparse.Namespace) -> int:
    if (not 0 <= args.clarify_below <= 1 or args.dialogues < 0 or args.episodes < 0
            or not 0 <= args.paraphrase or not 0 <= args.intent_snap):
        print("diffvoice eval-model: error: --clarify-below must be in [0, 1], --paraphrase "
              "and --intent-snap >= 0, --dialogues and --episodes >= 0", file=sys.stderr)
        return 2
    if args.per_template < 1 or args.concurrency < 1 or (args.limit is not None and args.limit < 1):
        print("diffvoice eval-model: error: --per-template, --concurrency and --limit must be >= 1",
              file=sys.stderr)
        return 2
    try:
        report = evaluate(args.model, args.facts, tuple(args.settings), args.per_template,
                          args.limit, args.max_new_tokens, args.concurrency, args.seed,
                          args.chitchat, args.threads, args.dialogues, args.independent,
                          args.clarify_below, tuple(args.paths), args.episodes,
                          None if args.paraphrase > 1 else args.paraphrase, args.grounding,
                          args.retry, None if args.intent_snap > 1 else args.intent_snap,
                          tuple(args.without), tuple(args.sets))
    except (ValueError, FileNotFoundError) as exc:
        print(f"diffvoice eval-model: error: {exc}", file=sys.stderr)
        return 2
    print(markdown_table(report))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m diffvoice.agent.train.cli train|eval-model ...` (= the diffvoice subcommands)."""
    parser = argparse.ArgumentParser(prog="python -m diffvoice.agent.train.cli")
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_arguments(sub.add_parser("train"))
    add_eval_arguments(sub.add_parser("eval-model"))
    args = parser.parse_args(argv)
    return run_train(args) if args.command == "train" else run_eval(args)


if __name__ == "__main__":
    raise SystemExit(main())
