"""CallSerializer turns Twilio media into pipeline audio itself at 16 kHz (table mu-law decode,
then the 2x interpolator, from the message it already parsed): the samples are the interpolator's
output for the decoded stream, frame after frame, and sound like pipecat's own soxr path; at
8 kHz the decoded samples pass as they are."""

import base64
import json
from types import SimpleNamespace

import numpy as np
from pipecat.frames.frames import InputAudioRawFrame
from pipecat.serializers.twilio import TwilioFrameSerializer

from diffvoice.voice.telephony import mulaw
from diffvoice.voice.telephony.media_stream import CallSerializer
from diffvoice.voice.telephony.playout import PlayoutTracker
from diffvoice.voice.telephony.upsample import Upsampler2x


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


async def test_media_at_16k_is_the_interpolated_decoded_stream():
    serializer, setup = _serializer(16000)
    await serializer.setup(setup)
    ulaw = _speechlike()
    frames = [await serializer.deserialize(_media(ulaw[i:i + 160]))
              for i in range(0, len(ulaw), 160)]
    assert all(isinstance(f, InputAudioRawFrame) and f.sample_rate == 16000 for f in frames)
    ours = np.frombuffer(b"".join(f.audio for f in frames), np.int16)
    assert np.array_equal(ours, Upsampler2x().process(mulaw.decode(ulaw)))
    # pipecat's own path (soxr) on the same messages: the same sound, up to the two filters
    theirs = TwilioFrameSerializer("MZ1", params=TwilioFrameSerializer.InputParams(
        auto_hang_up=False, resampler_clear_after_secs=None))
    await theirs.setup(setup)
    theirs_frames = [await theirs.deserialize(_media(ulaw[i:i + 160]))
                     for i in range(0, len(ulaw), 160)]  # (soxr holds the first frames back)
    ref = np.frombuffer(b"".join(f.audio for f in theirs_frames if f is not None), np.int16)
    n = min(len(ours), len(ref)) - 200
    best = max(np.corrcoef(ours[lag:lag + n].astype(float), ref[:n].astype(float))[0, 1]
               for lag in range(0, 120))
    assert best > 0.99


async def test_media_at_8k_passes_the_decoded_samples():
    serializer, setup = _serializer(8000)
    await serializer.setup(setup)
    ulaw = _speechlike(0.1)
    frame = await serializer.deserialize(_media(ulaw))
    assert frame.sample_rate == 8000
    assert np.array_equal(np.frombuffer(frame.audio, np.int16), mulaw.decode(ulaw))
