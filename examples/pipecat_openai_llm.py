"""The same pipecat app, talking to `diffvoice serve` through pipecat's own OpenAILLMService.

    diffvoice serve --api-only --port 8000 &
    python examples/pipecat_openai_llm.py --base-url http://127.0.0.1:8000/v1 "When do you open?"

Nothing diffvoice-specific is imported: any pipecat app that already uses OpenAILLMService can
point it at the server. The diffusion knobs are not OpenAI fields, so the OpenAI client would
reject them as keyword arguments; in pipecat 1.x they go in the settings' `extra` dict under
`extra_body`, which pipecat merges into every request and the client sends as top-level JSON
fields:

    OpenAILLMService.Settings(model=..., extra={"extra_body": {"steps_per_block": 2,
                                                              "policy": "threshold"}})

Prints the answer; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _pipeline, beside this file

from _pipeline import ask  # noqa: E402
from pipecat.services.openai.llm import OpenAILLMService  # noqa: E402

SYSTEM = "You are a friendly phone receptionist. Answer in one or two short sentences."


async def main(question: str, base_url: str, model: str, api_key: str) -> str:
    settings = OpenAILLMService.Settings(
        model=model, max_tokens=48,
        extra={"extra_body": {"policy": "threshold", "threshold": 0.9, "steps_per_block": 4}})
    llm = OpenAILLMService(base_url=base_url, api_key=api_key, settings=settings)
    return await ask(llm, question, system=SYSTEM)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="When are you open on Saturday?")
    parser.add_argument("--base-url", default="http://127.0.0.1:8000/v1")
    parser.add_argument("--model", default="receptionist-tiny",
                        help="a name from GET /v1/models (see --served-model-name)")
    parser.add_argument("--api-key", default="unused", help="only checked with --api-keys")
    args = parser.parse_args()
    print(asyncio.run(main(args.question, args.base_url, args.model, args.api_key)))
