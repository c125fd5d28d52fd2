"""Issue 54 N7: after an event-loop stall over pipecat's write timeout, live browser calls stayed
connected but never got audio again (pipecat's output transport marks itself unusable after one
write over `audio_out_write_timeout_secs` and writes nothing from then on; nothing closed the
call). BrowserTransport's output now reports it (`on_output_stalled`), which the session turns
into a close 1013 `output_stalled` (voice.transport.ws_session; Twilio: twilio_call)."""

from __future__ import annotations

import asyncio

import numpy as np
from pipecat.frames.frames import TTSAudioRawFrame, TTSStartedFrame, TTSStoppedFrame
from pipecat.pipeline.worker import PipelineParams
from pipecat.tests.utils import SleepFrame, run_test

from diffvoice.voice.transport import protocol
from diffvoice.voice.transport.browser import BrowserTransport


async def test_a_write_over_the_timeout_reports_the_output_stalled_once():
    sent, stalled = [], []
    hold = asyncio.Event()

    async def send(pcm: bytes) -> bool:  # the first write hangs, as under a stalled loop
        sent.append(pcm)
        await hold.wait()
        return True

    transport = BrowserTransport(send, input_sample_rate=16000, output_sample_rate=16000)
    out = transport.output()
    out._params.audio_out_write_timeout_secs = 0.2  # pipecat's default is 10 s
    out.on_output_stalled = lambda: stalled.append(out.is_usable)
    pcm = (np.random.default_rng(0).normal(0, 3000, 16000)).astype(np.int16).tobytes()
    frames = [TTSStartedFrame(),
              *(TTSAudioRawFrame(audio=pcm[i:i + 6400], sample_rate=16000, num_channels=1)
                for i in range(0, len(pcm), 6400)),
              TTSStoppedFrame(), SleepFrame(0.6)]
    await run_test(out, frames_to_send=frames,
                   pipeline_params=PipelineParams(audio_out_sample_rate=16000))
    hold.set()
    assert stalled == [False]  # once, and the output is unusable: no audio would ever follow
    assert len(sent) == 1


def test_output_stalled_closes_1013_not_1011():
    error = protocol.ProtocolError("output_stalled", "x")
    assert error.close_code == 1013
