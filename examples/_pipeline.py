"""Shared by the two pipecat examples: run `llm` in a two-processor pipecat pipeline on one
user message and return the text it streamed (LLMTextFrames), i.e. text in, text out.

In a voice app the collector's place is taken by your TTS service and transport output, and the
user message comes from your STT through pipecat's context aggregators.
"""

from __future__ import annotations

from pipecat.frames.frames import EndFrame, Frame, LLMContextFrame, LLMTextFrame
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner


class TextCollector(FrameProcessor):
    """Keeps every LLMTextFrame's text (a TTS service would speak them instead)."""

    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, LLMTextFrame):
            self.parts.append(frame.text)
        await self.push_frame(frame, direction)


async def ask(llm, question: str, system: str | None = None) -> str:
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": question}]
    collector = TextCollector()
    worker = PipelineWorker(Pipeline([llm, collector]), params=PipelineParams(),
                            enable_rtvi=False, idle_timeout_secs=None)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    # the context frame runs the LLM; EndFrame lets the pipeline finish after the answer
    await worker.queue_frames([LLMContextFrame(LLMContext(messages=messages)), EndFrame()])
    await runner.run()
    return "".join(collector.parts).strip()
