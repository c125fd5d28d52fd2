"""Ready means warm: before a server says it is ready (GET /healthz 200), one answer has gone
through the call path, so its first caller waits no longer than later ones.

What a first call loaded lazily, measured on this project's CPU (2026-12-06): the agent's
paraphrase snap (its sentence encoder and answer bank, 2.7 s on the first rewrite; a first
call's answer came 1,033 ms after the caller stopped against 336-545 ms for later ones),
pipecat's OpenAI adapter (the openai package, ~2.4 s) and Silero's ONNX session (~0.3 s).

    readiness = Readiness()                 # state.readiness; /healthz reads it
    await warm_up(state)                    # in the app's lifespan, as a task: the server
                                            # answers /healthz 503 {"status": "warming"} meanwhile

`warm_up` runs, each part timed (seconds, in `readiness.parts`) and none fatal (a part that
fails is logged and named in `readiness.failed`; the server still becomes ready: a warm-up is an
optimisation, and a call would load the part anyway):
  pipecat     the OpenAI adapter import and the shared Silero session (voice calls)
  smart_turn  one prediction of the shared Smart Turn model (with --smart-turn)
  asr         one recognition pass over a second of quiet noise (whisper)
  answer      one answer to the agent card's first example question, served as a call serves it
              (agent.pipeline.serve with the LLM service's parameters and the receptionist's
              tools): the agent's rewrite, the engine's plans and the tool constraint
  heap        a full garbage collection, then gc.freeze(): what start-up built (the paraphrase
              bank, the models, about half a million objects) moves to the permanent
              generation, so a later full collection, which runs on whichever thread allocates
              (the event loop's, often), does not walk it again: on this CPU one took 240 ms
              before and ~0 after, and such pauses stalled every call's loop by 340-370 ms in
              the reliability siege (issue 54)
Knows nothing about HTTP.
"""

from __future__ import annotations

import asyncio
import gc
import time
from dataclasses import dataclass, field

import numpy as np
from loguru import logger

FALLBACK_QUESTION = "Hello, are you open today?"


@dataclass
class Readiness:
    ready: bool = False
    reason: str = "warming up the call path"
    parts: dict[str, float] = field(default_factory=dict)  # part -> seconds
    failed: dict[str, str] = field(default_factory=dict)  # part -> error

    def as_dict(self) -> dict:
        return {"ready": self.ready, "parts_s": {k: round(v, 3) for k, v in self.parts.items()},
                "failed": dict(self.failed)}


def _pipecat() -> None:
    import pipecat.adapters.llm.services.open_ai_adapter  # noqa: F401

    from diffvoice.voice.vad import shared_session

    shared_session()


def _smart_turn() -> None:
    from diffvoice.voice.smart_turn import shared_smart_turn

    shared_smart_turn().predict(_quiet_noise(16000), 16000)


def _quiet_noise(n: int) -> np.ndarray:
    return (np.random.default_rng(0).standard_normal(n) * 30).astype(np.int16)


def _asr(state) -> None:
    asr = state.asr
    if getattr(asr, "kind", None) != "whisper":
        return  # pocketsphinx's decoders are built at load (voice.app.load_state)
    from diffvoice.voice.asr.resolve import streaming_options
    from diffvoice.voice.asr.whisper_pass import WhisperPassRunner

    runner = WhisperPassRunner(asr.model, streaming_options(**asr.options).passes)
    runner.run(_quiet_noise(16000).astype(np.float32) / 32768.0, None)


def question(state) -> str:
    from diffvoice.agent.card import agent_card

    card = agent_card(state.config.model) or {}
    return (card.get("examples") or [FALLBACK_QUESTION])[0]


async def _answer(state) -> None:
    from diffvoice.agent.pipeline import serve
    from diffvoice.voice.chat_messages import context_to_messages
    from diffvoice.voice.pipeline import call_context, served_llm
    from diffvoice.voice.receptionist.setup import agent_of

    context = call_context(state)
    llm = served_llm(state, request_prefix="warmup")
    messages = context_to_messages([{"role": "user", "content": question(state)}],
                                   state.config.system_prompt)
    async for _ in serve(agent_of(state), state.engine, messages, llm.params_for(context),
                         request_id="warmup-1"):
        pass


async def _freeze_heap() -> None:
    gc.collect()
    gc.freeze()


async def warm_up(state) -> Readiness:
    readiness = state.readiness
    voice = not state.config.api_only
    parts = [
        ("pipecat", lambda: asyncio.to_thread(_pipecat), voice),
        ("smart_turn", lambda: asyncio.to_thread(_smart_turn),
         voice and getattr(state.config, "smart_turn", False)),
        ("asr", lambda: asyncio.to_thread(_asr, state), voice and state.asr is not None),
        ("answer", lambda: _answer(state), state.engine is not None),
        ("heap", _freeze_heap, True),
    ]
    for name, run, wanted in parts:
        if not wanted:
            continue
        readiness.reason = f"warming up the call path: {name}"
        started = time.perf_counter()
        try:
            await run()
        except Exception as e:  # a call would load it anyway; say so, and go on
            readiness.failed[name] = repr(e)
            logger.warning(f"warm-up of {name} failed: {e!r}")
        readiness.parts[name] = time.perf_counter() - started
    readiness.ready, readiness.reason = True, ""
    took = ", ".join(f"{k} {v:.2f}s" for k, v in readiness.parts.items())
    logger.info(f"ready: the call path is warm ({took})")
    return readiness
