"""A pipecat app whose LLM is diffvoice's in-process diffusion engine: DiffusionLLMService.

    python examples/pipecat_diffusion_llm.py "When are you open on Saturday?"
    python examples/pipecat_diffusion_llm.py --model /models/SDAR-1.7B-Chat "Hi"

The engine runs inside your process (no server); DiffusionLLMService is a regular pipecat
LLMService, so it drops into any pipeline between the user context aggregator and your TTS.
The diffusion knobs are constructor arguments: `max_new_tokens`, `steps_per_block` and, for
anything else SamplingParams has, `sampling_overrides` (e.g. {"policy": "threshold",
"threshold": 0.9}). Prints the answer; exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # for _pipeline, beside this file

from _pipeline import ask  # noqa: E402

from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig  # noqa: E402
from diffvoice.voice.llm_service import DiffusionLLMService  # noqa: E402

SYSTEM = "You are a friendly phone receptionist. Answer in one or two short sentences."


async def main(question: str, model: str, device: str) -> str:
    engine = Engine.from_pretrained(model, EngineConfig(device=device, max_running=4))
    try:
        llm = DiffusionLLMService(engine, system_prompt=SYSTEM, max_new_tokens=48,
                                  steps_per_block=4,
                                  sampling_overrides={"policy": "threshold", "threshold": 0.9})
        return await ask(llm, question)
    finally:
        engine.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question", nargs="?", default="When are you open on Saturday?")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_DIR), help="checkpoint directory")
    parser.add_argument("--device", default="auto", help="cpu, cuda or auto")
    args = parser.parse_args()
    print(asyncio.run(main(args.question, args.model, args.device)))
