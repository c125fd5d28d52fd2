"""voice.call: the one place a call is assembled and run.

Structure: no module of the server but voice.call calls voice.pipeline.build_pipeline, and none
reads attributes patched onto pipecat's worker. Behaviour: `start_call` runs the pipeline,
`started()` waits for every processor, `close()` ends it (also one cancelled mid-start, which
waits for the start so no processor's start() task is orphaned), and a builder may return a
(pipeline, worker) tuple (tests' stand-ins)."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameProcessor

from diffvoice.voice.call import Call, start_call

VOICE = Path(__file__).resolve().parents[2] / "voice"


def _names_used(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    names |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    return names


def test_only_voice_call_assembles_a_call():
    users = sorted(str(p.relative_to(VOICE)) for p in VOICE.rglob("*.py")
                   if "build_pipeline" in _names_used(p))
    # (pipeline.py defines it) twilio.py / twilio_call.py only pass a test's stand-in on
    assert users == ["call.py", "telephony/twilio.py", "telephony/twilio_call.py"], users
    for name in ("telephony/twilio.py", "telephony/twilio_call.py"):
        tree = ast.parse((VOICE / name).read_text())
        imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                    for a in n.names}
        assert "build_pipeline" not in imported, name
    patched = [str(p.relative_to(VOICE)) for p in VOICE.rglob("*.py")
               if any(n.startswith("diffvoice_") for n in _names_used(p))]
    assert patched == [], patched


class _Slow(FrameProcessor):
    """Takes `secs` to start (a processor loading a model in start())."""

    def __init__(self, secs: float) -> None:
        super().__init__()
        self.secs, self.started_ok = secs, False

    async def process_frame(self, frame, direction) -> None:
        await super().process_frame(frame, direction)
        from pipecat.frames.frames import StartFrame

        if isinstance(frame, StartFrame):
            await asyncio.sleep(self.secs)
            self.started_ok = True
        await self.push_frame(frame, direction)


def _builder(slow: _Slow):
    def build(state, transport, *, session_id, **_):
        pipeline = Pipeline([slow])
        return pipeline, PipelineWorker(pipeline, params=PipelineParams(), enable_rtvi=False)
    return build


async def test_start_and_close():
    slow = _Slow(0.0)
    call = start_call(None, None, session_id="t1", build=_builder(slow))
    assert isinstance(call, Call)
    assert await call.started(10)
    assert slow.started_ok and not call.done.done()
    await call.close("test")
    assert call.done.done()
    await call.close("again")  # idempotent


async def test_a_cancel_before_the_start_waits_for_it():
    slow = _Slow(0.5)
    call = start_call(None, None, session_id="t2", build=_builder(slow))
    await asyncio.sleep(0.05)
    assert not call.is_started
    await call.close("caller left at once")
    assert slow.started_ok  # the start finished before the cancel went in
    assert call.done.done()
