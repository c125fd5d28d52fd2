"""Audio formats of the Realtime protocol: `audio/pcm` (24 kHz int16 mono, little-endian),
`audio/pcmu` (G.711 mu-law, 8 kHz) and `audio/pcma` (G.711 A-law, 8 kHz).

Contract:
* `Format.parse(obj)` -> Format from a session's `{"type": ..., "rate": ...}` (ValueError naming
  what is wrong); `fmt.as_dict()` the session's shape; `fmt.bytes_per_second`.
* `Decoder(fmt, out_rate)`: `await dec.pcm(data)` -> int16 PCM at `out_rate` (the pipeline's
  16 kHz), through one soxr stream resampler per call (pipecat's).
* `Encoder(fmt, in_rate)`: `await enc.encode(pcm)` -> the client's bytes from the pipeline's
  output PCM at `in_rate`.
* `alaw_encode` / `alaw_decode`: G.711 A-law in numpy, bit-exact with CPython's
  `audioop.lin2alaw(..., 2)` / `alaw2lin` (Sun g711.c); mu-law is voice.telephony.mulaw.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pipecat.audio.utils import create_stream_resampler

from diffvoice.voice.telephony import mulaw

PCM_RATE = 24000
# soxr's "LQ" holds back 6 ms of a stream; pipecat's default "VHQ" 37.5 ms, on the way in and
# again on the way out: a Realtime turn was ~60 ms slower than /ws's in endpointing alone
# (docs/perf-realtime). Speech at 16 kHz for the recogniser and TTS audio lose nothing a
# listener or the recogniser notices at LQ (passband to 0.8 of Nyquist, 16-bit).
QUALITY = "LQ"
G711_RATE = 8000
TYPES = ("audio/pcm", "audio/pcmu", "audio/pcma")

# upper bounds of the 8 A-law segments, on 13-bit magnitudes
_A_SEG_ENDS = np.array([0x1F, 0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF], dtype=np.int32)


def alaw_encode(pcm: np.ndarray) -> bytes:
    """int16 PCM samples -> A-law bytes."""
    x = np.asarray(pcm, dtype=np.int16).astype(np.int32) >> 3  # 13-bit
    negative = x < 0
    mask = np.where(negative, 0x55, 0xD5)
    magnitude = np.where(negative, -x - 1, x)
    segment = np.searchsorted(_A_SEG_ENDS, magnitude, side="left")
    shift = np.where(segment < 2, 1, segment)
    code = (np.minimum(segment, 7) << 4) | ((magnitude >> np.minimum(shift, 7)) & 0x0F)
    code = np.where(segment >= 8, 0x7F, code)
    return (code ^ mask).astype(np.uint8).tobytes()


def _alaw_decode_ref(data: bytes) -> np.ndarray:
    a = np.frombuffer(data, dtype=np.uint8).astype(np.int32) ^ 0x55
    t = (a & 0x0F) << 4
    seg = (a & 0x70) >> 4
    t = np.where(seg == 0, t + 8, t + 0x108)
    t = np.where(seg > 1, t << np.maximum(seg - 1, 0), t)
    return np.where(a & 0x80, t, -t).astype(np.int16)


_A_TABLE = _alaw_decode_ref(bytes(range(256)))


def alaw_decode(data: bytes) -> np.ndarray:
    """A-law bytes -> int16 PCM samples."""
    return _A_TABLE[np.frombuffer(data, dtype=np.uint8)]


@dataclass(frozen=True)
class Format:
    type: str = "audio/pcm"

    @property
    def rate(self) -> int:
        return PCM_RATE if self.type == "audio/pcm" else G711_RATE

    @property
    def bytes_per_second(self) -> int:
        return self.rate * (2 if self.type == "audio/pcm" else 1)

    def as_dict(self) -> dict:
        out: dict = {"type": self.type}
        if self.type == "audio/pcm":
            out["rate"] = PCM_RATE
        return out

    @classmethod
    def parse(cls, obj) -> Format:
        if not isinstance(obj, dict):
            raise ValueError("format must be an object like {\"type\": \"audio/pcm\", "
                             "\"rate\": 24000}")
        kind = obj.get("type")
        if kind not in TYPES:
            raise ValueError(f"format type {str(kind)[:40]!r} is not supported: use one of "
                             f"{', '.join(TYPES)}")
        rate = obj.get("rate")
        if kind == "audio/pcm" and rate not in (None, PCM_RATE):
            raise ValueError(f"audio/pcm is served at {PCM_RATE} Hz only, not {str(rate)[:20]}")
        return cls(kind)


def _pcm_of(fmt: Format, data: bytes) -> np.ndarray:
    if fmt.type == "audio/pcmu":
        return mulaw.decode_fast(data)
    if fmt.type == "audio/pcma":
        return alaw_decode(data)
    return np.frombuffer(data[: len(data) // 2 * 2], dtype="<i2")


class Decoder:
    """Client audio -> int16 PCM bytes at `out_rate`."""

    def __init__(self, fmt: Format, out_rate: int) -> None:
        self.fmt, self.out_rate = fmt, out_rate
        # caller audio is one continuous stream however it is chunked: pipecat's default (reset
        # after 0.2 s without input) cut ~44 ms from every append sent > 0.2 s after the last
        self._resampler = create_stream_resampler(clear_after_secs=None, quality=QUALITY)

    async def pcm(self, data: bytes) -> bytes:
        pcm = _pcm_of(self.fmt, data).astype("<i2").tobytes()
        if self.fmt.rate == self.out_rate:
            return pcm
        return await self._resampler.resample(pcm, self.fmt.rate, self.out_rate)


class Encoder:
    """The pipeline's int16 PCM at `in_rate` -> the client's format."""

    def __init__(self, fmt: Format, in_rate: int) -> None:
        self.fmt, self.in_rate = fmt, in_rate
        self._resampler = create_stream_resampler(quality=QUALITY)

    async def encode(self, pcm: bytes) -> bytes:
        if self.fmt.rate != self.in_rate:
            pcm = await self._resampler.resample(pcm, self.in_rate, self.fmt.rate)
        if self.fmt.type == "audio/pcm":
            return pcm
        samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
        return mulaw.encode(samples) if self.fmt.type == "audio/pcmu" else alaw_encode(samples)
