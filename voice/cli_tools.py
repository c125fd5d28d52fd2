"""`diffvoice tools --model DIR`: the receptionist's tools as the server decodes them, as JSON.

Prints the OpenAI `tools` list (agent.tools.served_tool_schemas): what an API
client should send with its chat requests to have bookings decoded as the voice agent decodes
them (docs/tool-calling.md has a runnable example).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from diffvoice.voice.config import DEFAULT_MODEL_DIR

    parser.add_argument("--model", type=Path, default=Path(DEFAULT_MODEL_DIR),
                        help="model directory with a facts.yaml (default: the shipped "
                             "receptionist)")
    parser.add_argument("--facts", type=Path, default=None,
                        help="fact sheet (default: the model's facts.yaml)")


def run(args: argparse.Namespace) -> int:
    from diffvoice.agent.tools import served_tool_schemas

    try:
        tools = served_tool_schemas(args.model, args.facts)
    except (OSError, ValueError) as exc:
        print(f"diffvoice tools: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(tools, indent=2))
    return 0
