"""Issue 12 (barge-in storm finding): audio of an interrupted answer that reaches the output
transport after the interruption is dropped, audio of the next answer is not."""

from pipecat.frames.frames import OutputAudioRawFrame, TTSStartedFrame

from diffvoice.voice.transport.browser import BrowserTransport


def _chunk() -> OutputAudioRawFrame:
    return OutputAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000, num_channels=1)


async def test_chunks_from_before_the_interruption_are_dropped():
    sent = []

    async def send(pcm: bytes) -> bool:
        sent.append(pcm)
        return True

    out = BrowserTransport(send, input_sample_rate=16000, output_sample_rate=16000).output()
    old_a, old_b = _chunk(), _chunk()
    uninterruptible = _chunk()
    uninterruptible.interruptible = False
    assert await out.write_audio_frame(old_a) and len(sent) == 1
    out.stale.interrupted()  # what process_frame does first on an InterruptionFrame
    late = _chunk()  # the TTS still pushed audio of the interrupted answer after it
    assert await out.write_audio_frame(old_b)  # reported written (so pipecat goes on) ...
    assert await out.write_audio_frame(late)
    assert len(sent) == 1 and out.stale.dropped == 2  # ... but never sent
    assert await out.write_audio_frame(uninterruptible) and len(sent) == 2
    out.stale.started(TTSStartedFrame())  # the next answer begins
    new = _chunk()
    assert await out.write_audio_frame(new) and len(sent) == 3
    assert await out.write_audio_frame(_chunk()) and len(sent) == 4


def test_a_tts_started_frame_of_the_interrupted_answer_does_not_resume_its_audio():
    """The storm's 141 stale frames: the interrupted answer's own TTSStartedFrame, made before
    the barge-in but pushed by the TTS's audio-context task after the InterruptionFrame went by,
    re-opened the gate for the rest of that answer. Audio made before the interruption that
    reaches the output transport after it is dropped before pipecat re-chunks it."""
    from pipecat.frames.frames import TTSAudioRawFrame

    from diffvoice.voice.transport.stale_audio import StaleAudioGuard

    guard = StaleAudioGuard()
    old_started = TTSStartedFrame()
    old_audio = TTSAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000, num_channels=1)
    assert not guard.drops(old_audio)  # no interruption yet
    guard.interrupted()
    guard.started(old_started)  # arrives late: must not count as the next answer
    assert guard.is_stale(_chunk())
    assert guard.drops(old_audio)
    keep = TTSAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000, num_channels=1)
    keep.interruptible = False
    assert not guard.drops(keep)  # uninterruptible audio is always played
    guard.started(TTSStartedFrame())  # the next answer, made after the interruption
    assert not guard.is_stale(_chunk())
    assert not guard.drops(TTSAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000,
                                            num_channels=1))


async def test_the_output_transport_drops_old_audio_before_rechunking():
    from pipecat.frames.frames import TTSAudioRawFrame
    from pipecat.processors.frame_processor import FrameDirection

    async def send(pcm: bytes) -> bool:
        return True

    out = BrowserTransport(send, input_sample_rate=16000, output_sample_rate=16000).output()
    seen = []

    async def handle(frame, direction):  # what pipecat's output transport would queue
        seen.append(frame)

    old = TTSAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000, num_channels=1)
    out.stale.interrupted()
    base = type(out).__mro__[1]
    original = base.process_frame
    base.process_frame = lambda self, frame, direction: handle(frame, direction)
    try:
        await out.process_frame(old, FrameDirection.DOWNSTREAM)
        assert seen == [] and out.stale.dropped == 1
        new = TTSAudioRawFrame(audio=b"\1\0" * 160, sample_rate=16000, num_channels=1)
        await out.process_frame(new, FrameDirection.DOWNSTREAM)
        assert seen == [new]
    finally:
        base.process_frame = original


async def test_answers_go_out_in_chunks_of_chunk_secs_and_whole():
    """The browser output sends 100 ms chunks (not pipecat's 40 ms): 1.05 s of TTS audio leaves
    as ten full chunks plus its tail padded to a chunk at TTSStoppedFrame, nothing lost."""
    import numpy as np
    from pipecat.frames.frames import TTSAudioRawFrame, TTSStoppedFrame
    from pipecat.pipeline.worker import PipelineParams
    from pipecat.tests.utils import SleepFrame, run_test

    sent = []

    async def send(pcm: bytes) -> bool:
        sent.append(pcm)
        return True

    transport = BrowserTransport(send, input_sample_rate=16000, output_sample_rate=16000)
    pcm = (np.random.default_rng(0).normal(0, 3000, 16800)).astype(np.int16).tobytes()
    frames = [TTSStartedFrame(),
              *(TTSAudioRawFrame(audio=pcm[i:i + 6400], sample_rate=16000, num_channels=1)
                for i in range(0, len(pcm), 6400)),
              TTSStoppedFrame(), SleepFrame(1.5)]
    await run_test(transport.output(), frames_to_send=frames,
                   pipeline_params=PipelineParams(audio_out_sample_rate=16000))
    assert [len(c) for c in sent] == [3200] * 11
    assert b"".join(sent)[: len(pcm)] == pcm and not any(b"".join(sent)[len(pcm):])
