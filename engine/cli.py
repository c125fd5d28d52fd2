"""`diffvoice` console script: one registry of subcommands, each a module imported only when used.

Each entry names a module with `add_arguments(parser)` and `run(args) -> int` (or the two
function names given). The registry is explicit; nothing is discovered at import time.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

DESCRIPTION = ("diffvoice: a self-hosted real-time voice agent whose language model is a diffusion "
               "LM running in-process. Start with `diffvoice serve` and open the printed URL.")

COMMANDS: dict[str, tuple[str, str, str, str]] = {
    # name: (module, add-arguments function, run function, help)
    "serve": ("diffvoice.voice.cli_serve", "add_arguments", "run",
              "serve the voice agent: browser demo, Twilio webhooks, OpenAI-compatible API"),
    "chat": ("diffvoice.engine.chat_cli", "add_chat_arguments", "run_chat",
             "chat with a model in the terminal (prints first-block latency and tok/s)"),
    "generate": ("diffvoice.engine.chat_cli", "add_generate_arguments", "run_generate",
                 "answer one prompt and exit"),
    "bench": ("diffvoice.latency_bench.cli", "add_arguments", "run",
              "latency benchmarks: `bench voice`, `bench engine`, `bench render`"),
    "train": ("diffvoice.agent.train.cli_train", "add_arguments", "run",
              "train the receptionist model for your own business from a fact sheet"),
    "tools": ("diffvoice.voice.cli_tools", "add_arguments", "run",
              "print the receptionist's tools as the server decodes them (JSON, for API clients)"),
    "eval-model": ("diffvoice.agent.train.cli", "add_eval_arguments", "run_eval",
                   "fact accuracy, EOS rate and latency of a trained receptionist model"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diffvoice", description=DESCRIPTION,
                                     epilog="`diffvoice COMMAND --help` lists a command's options.")
    parser.add_argument("--log-level", default="INFO", help="logging level (DEBUG, INFO, ...)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = next((a for a in argv if a in COMMANDS), None)
    for name, (module, add, _, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # import only the module that will run
            getattr(importlib.import_module(module), add)(p)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = build_parser(argv).parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True)
    module, _, run, _ = COMMANDS[args.command]
    return int(getattr(importlib.import_module(module), run)(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
