"""ServeConfig.input_frame_ms reaches the caller's input transport (voice.pipeline): the browser
transport groups that many ms of whole VAD windows per pipeline frame."""

import dataclasses

import pytest

from diffvoice.voice.pipeline import build_pipeline
from diffvoice.voice.transport.browser import BrowserTransport


async def _send(_pcm: bytes) -> bool:
    return True


@pytest.mark.parametrize("frame_ms, windows", [(32, 1), (64, 2), (128, 4)])
def test_input_frame_ms_sets_the_windows_per_frame(voice_state, frame_ms, windows):
    state = dataclasses.replace(voice_state,
                                config=dataclasses.replace(voice_state.config,
                                                           input_frame_ms=frame_ms))
    transport = BrowserTransport(_send, input_sample_rate=16000, output_sample_rate=16000)
    build_pipeline(state, transport, session_id=f"frames-{frame_ms}")
    assert transport.input().windows_per_frame == windows
