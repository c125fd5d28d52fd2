"""A Twilio caller's audio as the server hears it, for the ASR benches and their tests.

`phone_ticks(pcm)`: 16 kHz int16 speech downsampled to 8 kHz and mu-law encoded per 20 ms frame
as the load generator's Twilio client sends it (latency_bench.twilio_client), then decoded by the
server's own voice.telephony.media_stream.CallSerializer (mu-law by table, pipecat's soxr stream
resampler back to 16 kHz): what each media message released to the pipeline. `phone_path(pcm)`:
the same as one array. Knows nothing about recognisers or reports.
"""

from __future__ import annotations

import base64
import json

import numpy as np


async def phone_path(pcm: np.ndarray, quality: str | None = None) -> np.ndarray:
    """16 kHz int16 speech as the server hears it from a Twilio caller (`phone_ticks`), as one
    array: about twice the 8 kHz samples, less what the resampler still holds (a call never
    flushes it)."""
    ticks = await phone_ticks(pcm, quality)
    return np.concatenate(ticks) if ticks else np.zeros(0, np.int16)


async def phone_ticks(pcm: np.ndarray, quality: str | None = None) -> list[np.ndarray]:
    """16 kHz int16 speech as the server hears it from a Twilio caller: downsampled to 8 kHz and
    mu-law encoded per 20 ms frame as latency_bench.twilio_client sends it, then decoded by
    voice.telephony.media_stream.CallSerializer (mu-law table + pipecat's soxr stream resampler
    to 16 kHz). One int16 array per 20 ms media message: the audio that message released to
    the pipeline, often none (the VHQ stream resampler releases ~95 ms blocks every 4-5
    messages, holding back 17-110 ms)."""
    from pipecat.frames.frames import InputAudioRawFrame, StartFrame

    from diffvoice.latency_bench.corpus import SAMPLE_RATE, Prompt
    from diffvoice.latency_bench.twilio_client import FRAME_SAMPLES, _phone_audio
    from diffvoice.voice.ingest_limit import IngestLimit
    from diffvoice.voice.telephony import mulaw
    from diffvoice.voice.telephony.media_stream import CallSerializer
    from diffvoice.voice.telephony.playout import PlayoutTracker

    pcm = np.asarray(pcm, dtype=np.int16)
    prompt = Prompt(
        name="phone", text=None, pcm=pcm, speech_start_s=0.0, speech_end_s=len(pcm) / SAMPLE_RATE
    )
    phone, _ = _phone_audio(prompt)
    serializer = CallSerializer(
        stream_sid="MZbench",
        call_sid="CAbench",
        tracker=PlayoutTracker(lambda _record: None),
        on_stop=lambda: None,
        ingest_limit=IngestLimit(rate=0),
        **({"resampler_quality": quality} if quality else {}),
    )
    await serializer.setup(
        StartFrame(audio_in_sample_rate=SAMPLE_RATE, audio_out_sample_rate=SAMPLE_RATE)
    )
    out: list[np.ndarray] = []
    for k in range(len(phone) // FRAME_SAMPLES):
        payload = mulaw.encode(phone[k * FRAME_SAMPLES : (k + 1) * FRAME_SAMPLES])
        frame = await serializer.deserialize(
            json.dumps(
                {
                    "event": "media",
                    "streamSid": "MZbench",
                    "media": {"payload": base64.b64encode(payload).decode("ascii")},
                }
            )
        )
        released = np.zeros(0, np.int16)
        if isinstance(frame, InputAudioRawFrame):
            if frame.sample_rate != SAMPLE_RATE:
                raise RuntimeError(f"the serializer gave {frame.sample_rate} Hz audio")
            released = np.frombuffer(frame.audio, dtype=np.int16)
        out.append(released)
    return out
