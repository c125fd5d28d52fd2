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
