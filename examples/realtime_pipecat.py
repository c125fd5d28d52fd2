"""A pipecat voice app on diffvoice's /v1/realtime, through pipecat's OpenAIRealtimeLLMService.

pipecat's own Realtime client (speech in, speech out, as with gpt-realtime) is pointed at a
diffvoice server instead of api.openai.com:

    diffvoice serve &          # http://127.0.0.1:8000; /v1/realtime is on the same port
    python examples/realtime_pipecat.py question.wav --out answer.wav
    python examples/realtime_pipecat.py --text "When are you open on Saturday?"

With a WAV file (16-bit PCM, any rate; stereo is mixed down) the audio goes into the pipeline in
real time as 20 ms InputAudioRawFrames, as a transport's input would push them, followed by a
second of silence: the server's VAD (pipecat's default session: server_vad) ends the turn, the
server transcribes it and answers. Without one, --text goes in as a user message of the
LLMContext and an LLMRunFrame asks for the answer. Either way the answer's transcript is printed
and its audio (24 kHz mono) is written to --out.

Nothing diffvoice-specific is imported: the pipeline is pipecat's realtime example's
(LLMContext + LLMContextAggregatorPair around the service), with the transport swapped for a
file. In a real app, put your transport's input() first and output() after the service.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import wave

from loguru import logger
from pipecat.frames.frames import (
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    LLMFullResponseEndFrame,
    LLMRunFrame,
    LLMTextFrame,
    TranscriptionFrame,
    TTSAudioRawFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.services.openai.realtime.events import SessionProperties
from pipecat.services.openai.realtime.llm import OpenAIRealtimeLLMService
from pipecat.workers.runner import WorkerRunner

OUTPUT_RATE = 24000  # the Realtime API's audio/pcm


class Answer(FrameProcessor):
    """After the service, where a transport's output would go: keeps the answer's audio and text
    and notes when the response is over."""

    def __init__(self) -> None:
        super().__init__()
        self.audio, self.text, self.done = bytearray(), [], asyncio.Event()
        self.error: str | None = None

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            if isinstance(frame, TTSAudioRawFrame):
                self.audio += frame.audio
            elif isinstance(frame, LLMTextFrame):
                self.text.append(frame.text)
            elif isinstance(frame, LLMFullResponseEndFrame) and (self.audio or self.text):
                self.done.set()
        await self.push_frame(frame, direction)


class Heard(FrameProcessor):
    """Before the service: prints the user's transcript and notes a failure (the service pushes
    both upstream)."""

    def __init__(self, answer: Answer) -> None:
        super().__init__()
        self.answer = answer

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, TranscriptionFrame):
            print(f"user: {frame.text}", flush=True)
        elif isinstance(frame, ErrorFrame):
            self.answer.error = frame.error
            self.answer.done.set()
        await self.push_frame(frame, direction)


def read_wav(path: str) -> tuple[bytes, int]:
    """16-bit PCM WAV -> (mono int16 bytes, sample rate)."""
    with wave.open(path, "rb") as w:
        if w.getsampwidth() != 2:
            raise SystemExit(f"{path}: 16-bit PCM WAV expected")
        rate, channels, data = w.getframerate(), w.getnchannels(), w.readframes(w.getnframes())
    if channels > 1:
        import numpy as np

        data = np.frombuffer(data, np.int16).reshape(-1, channels).mean(axis=1)
        data = data.astype(np.int16).tobytes()
    return data, rate


async def stream_wav(worker: PipelineWorker, pcm: bytes, rate: int) -> None:
    """The file, then a second of silence, as 20 ms frames in real time."""
    pcm += bytes(rate * 2)
    step = rate // 50 * 2
    t0 = time.monotonic()
    for i, start in enumerate(range(0, len(pcm), step)):
        await asyncio.sleep(max(0.0, t0 + i * 0.02 - time.monotonic()))
        await worker.queue_frame(InputAudioRawFrame(audio=pcm[start:start + step],
                                                    sample_rate=rate, num_channels=1))


async def main(args: argparse.Namespace) -> int:
    settings = OpenAIRealtimeLLMService.Settings(
        model=args.model, session_properties=SessionProperties())  # server VAD, audio out
    if args.instructions:
        settings.system_instruction = args.instructions
    llm = OpenAIRealtimeLLMService(api_key=args.api_key, base_url=args.url, settings=settings)
    messages = [] if args.wav else [{"role": "user", "content": args.text}]
    pair = LLMContextAggregatorPair(LLMContext(messages))
    answer = Answer()
    worker = PipelineWorker(
        Pipeline([pair.user(), Heard(answer), llm, answer, pair.assistant()]),
        params=PipelineParams(), enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run())
    try:
        if args.wav:
            await stream_wav(worker, *read_wav(args.wav))
        else:
            await worker.queue_frame(LLMRunFrame())
        await asyncio.wait_for(answer.done.wait(), args.timeout)
    except TimeoutError:
        answer.error = (f"no answer within {args.timeout:g} s (is `diffvoice serve` running at "
                        f"{args.url}?)")
    if answer.error:
        print(answer.error)
        await worker.cancel()
        await running
        return 1
    await worker.queue_frame(EndFrame())
    await running
    print(f"assistant: {''.join(answer.text).strip()}")
    if answer.audio:
        with wave.open(args.out, "wb") as w:
            w.setnchannels(1)
            w.setsampwidth(2)
            w.setframerate(OUTPUT_RATE)
            w.writeframes(bytes(answer.audio))
        print(f"{len(answer.audio) / 2 / OUTPUT_RATE:.1f} s of answer audio -> {args.out}")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wav", nargs="?", help="a spoken question (16-bit PCM WAV); "
                        "without it, --text is asked as a typed message")
    parser.add_argument("--text", default="When are you open on Saturday?")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/v1/realtime",
                        help="the server's /v1/realtime (pipecat adds ?model=)")
    parser.add_argument("--model", default="receptionist-tiny",
                        help="a name from GET /v1/models (see --served-model-name)")
    parser.add_argument("--api-key", default="unused", help="only checked with --api-keys")
    parser.add_argument("--instructions", default=None,
                        help="the session's instructions (default: the server's system prompt)")
    parser.add_argument("--out", default="answer.wav", help="where the answer's audio goes")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds to wait")
    parser.add_argument("-v", "--verbose", action="store_true", help="pipecat's debug log")
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="DEBUG" if args.verbose else "WARNING")
    raise SystemExit(asyncio.run(main(args)))
