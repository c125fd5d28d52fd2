"""`diffvoice chat` and `diffvoice generate`: the engine from a terminal.

Both print the answer as it streams (block by block) and, per turn, the first-block latency and
tokens per second. Flags map onto SamplingParams / EngineConfig fields.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig, SamplingParams


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", type=Path, default=DEFAULT_MODEL_DIR,
                        help="checkpoint directory (default: the shipped receptionist model)")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    parser.add_argument("--dtype", default="auto", help="float32, bfloat16, float16 or auto")
    parser.add_argument("--system", default=None, help="system prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="answer token budget")
    parser.add_argument("--policy", default="threshold",
                        help="low_confidence, threshold or entropy")
    parser.add_argument("--steps-per-block", type=int, default=4,
                        help="passes per block (low_confidence)")
    parser.add_argument("--threshold", type=float, default=0.9,
                        help="commit slots above this probability (threshold)")
    parser.add_argument("--entropy-bound", type=float, default=0.5, help="gamma (entropy)")
    parser.add_argument("--block-size", type=int, default=None, help="decode block size")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy")
    parser.add_argument("--seed", type=int, default=None, help="sampling seed")


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)


def add_generate_arguments(parser: argparse.ArgumentParser) -> None:
    _common(parser)
    parser.add_argument("--prompt", required=True, help="the user message")


def _params(args) -> SamplingParams:
    return SamplingParams(max_new_tokens=args.max_new_tokens, policy=args.policy,
                          steps_per_block=args.steps_per_block, threshold=args.threshold,
                          entropy_bound=args.entropy_bound, block_size=args.block_size,
                          temperature=args.temperature, seed=args.seed)


def _engine(args) -> Engine:
    return Engine.from_pretrained(args.model, EngineConfig(device=args.device, dtype=args.dtype,
                                                           max_running=2))


class UsageError(Exception):
    """What the command line named cannot be used; the message says what and why (one line)."""


def _setup(args) -> tuple[Engine, SamplingParams]:
    """The engine and sampling parameters, or a UsageError naming the flag at fault."""
    try:
        params = _params(args)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if not Path(args.model).is_dir():
        raise UsageError(f"--model {args.model}: no such directory")
    try:
        return _engine(args), params
    except (OSError, ValueError, KeyError, TypeError) as e:  # the loaders' refusals
        raise UsageError(f"--model {args.model}: cannot load it: {e}") from None


def _explained(command: str, run):
    """Run `run()`; a UsageError is one line on stderr and exit status 2, not a traceback."""
    try:
        return run()
    except UsageError as e:
        print(f"diffvoice {command}: {e}", file=sys.stderr)
        return 2


async def answer(engine: Engine, messages: list[dict], params: SamplingParams, out=None):
    out = out or sys.stdout
    t0 = time.perf_counter()
    text, tokens, first, conf = "", 0, None, None
    async for d in engine.generate(messages, params):
        conf = d.first_block_confidence if d.first_block_confidence is not None else conf
        if first is None and d.token_ids:
            first = time.perf_counter() - t0
        tokens += len(d.token_ids)
        text += d.text
        out.write(d.text)
        out.flush()
    wall = time.perf_counter() - t0
    sure = "" if conf is None else f" | first-block confidence {conf:.2f}"
    out.write(f"\n  [first block {1000 * (first or 0):.1f} ms{sure} | {tokens} tokens in "
              f"{1000 * wall:.1f} ms = {tokens / wall if wall else 0:.0f} tok/s]\n")
    return text


def run_generate(args) -> int:
    return _explained("generate", lambda: _generate(args))


def _generate(args) -> int:
    engine, params = _setup(args)
    try:
        messages = ([{"role": "system", "content": args.system}] if args.system else [])
        messages.append({"role": "user", "content": args.prompt})
        asyncio.run(answer(engine, messages, params))
    finally:
        engine.close()
    return 0


def run_chat(args) -> int:
    return _explained("chat", lambda: _chat(args))


def _chat(args) -> int:
    engine, params = _setup(args)
    messages = [{"role": "system", "content": args.system}] if args.system else []
    print(f"diffvoice chat - {engine.model_name} on {engine.device}. Empty line or Ctrl-D quits.")
    try:
        while True:
            try:
                user = input("you> ").strip()
            except EOFError:
                break
            if not user:
                break
            messages.append({"role": "user", "content": user})
            sys.stdout.write("bot> ")
            reply = asyncio.run(answer(engine, messages, params))
            messages.append({"role": "assistant", "content": reply.strip()})
    finally:
        engine.close()
    return 0
