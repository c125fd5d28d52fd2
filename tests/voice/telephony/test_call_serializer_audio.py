"""CallSerializer turns Twilio media into pipeline audio from the message it already parsed
(mu-law by table, then pipecat's soxr stream at INPUT_RESAMPLER_QUALITY): the samples are
exactly what pipecat's own deserialize (a second JSON parse, audioop) gives with that resampler,
and every message's audio is released at once; at 8 kHz the decoded samples pass as they
are."""

import base64
import json
from types import SimpleNamespace

import numpy as np
from pipecat.audio.resamplers.soxr_stream_resampler import SOXRStreamAudioResampler
from pipecat.frames.frames import InputAudioRawFrame
from pipecat.serializers.twilio import TwilioFrameSerializer

from diffvoice.voice.telephony import mulaw
from diffvoice.voice.telephony.media_stream import INPUT_RESAMPLER_QUALITY, CallSerializer
from diffvoice.voice.telephony.playout import PlayoutTracker


def _serializer(rate):
    s = CallSerializer(stream_sid="MZ1", call_sid="CA1",
                       tracker=PlayoutTracker(lambda *a, **k: None), on_stop=lambda: None)
    return s, SimpleNamespace(audio_in_sample_rate=rate)


def _media(ulaw: bytes) -> str:
    return json.dumps({"event": "media", "streamSid": "MZ1",
                       "media": {"payload": base64.b64encode(ulaw).decode()}})


def _speechlike(seconds=1.0):
    t = np.arange(int(8000 * seconds)) / 8000
    rng = np.random.default_rng(3)
    x = sum(3000 / k * np.sin(2 * np.pi * 140 * k * t + rng.uniform(0, 6)) for k in range(1, 20))
    return mulaw.encode(np.clip(x * (1 + np.sin(2 * np.pi * 3 * t)), -32768, 32767))


async def test_media_at_16k_is_exactly_pipecats_own_deserialize():
    serializer, setup = _serializer(16000)
    await serializer.setup(setup)
    theirs = TwilioFrameSerializer("MZ1", params=TwilioFrameSerializer.InputParams(
        auto_hang_up=False, resampler_clear_after_secs=None))
    await theirs.setup(setup)
    theirs._input_resampler = SOXRStreamAudioResampler(quality=INPUT_RESAMPLER_QUALITY,
                                                       clear_after_secs=None)
    ulaw = _speechlike()
    ours, ref = [], []
    for i in range(0, len(ulaw), 160):
        message = _media(ulaw[i:i + 160])
        ours.append(await serializer.deserialize(message))
        ref.append(await theirs.deserialize(message))
    assert not [f for f in ours if f is None]  # each message's audio goes on at once
    assert not [f for f in ref if f is None]
    got = ours
    assert all(isinstance(f, InputAudioRawFrame) and f.sample_rate == 16000 for f in got)
    a = np.frombuffer(b"".join(f.audio for f in got), np.int16).astype(int)
    b = np.frombuffer(b"".join(f.audio for f in ref if f is not None), np.int16).astype(int)
    # two soxr streams given the same input differ by rounding (1-2 LSB), nothing more
    assert len(a) == len(b) >= 2 * len(ulaw) - 16 and np.abs(a - b).max() <= 2


async def test_media_at_8k_passes_the_decoded_samples():
    serializer, setup = _serializer(8000)
    await serializer.setup(setup)
    ulaw = _speechlike(0.1)
    frame = await serializer.deserialize(_media(ulaw))
    assert frame.sample_rate == 8000
    assert np.array_equal(np.frombuffer(frame.audio, np.int16), mulaw.decode(ulaw))
