"""G.711 mu-law codec in numpy, for Twilio Media Streams (8 kHz mu-law audio): the server's
stream input (voice.telephony.media_stream) and the load generator's Twilio client.

Contract: `encode(pcm_int16) -> bytes` and `decode(bytes) -> int16 array` are bit-exact with
CPython's `audioop.lin2ulaw(..., 2)` / `audioop.ulaw2lin(..., 2)` (the Sun g711.c algorithm on
14-bit magnitudes); `audioop` is deprecated and gone from Python 3.13, so we carry our own.
`decode_fast(bytes)` is `decode` through a 256-entry table (one numpy gather: a 20 ms Twilio
frame in ~2 us). No resampling here.
"""

from __future__ import annotations

import numpy as np

_BIAS = 0x84
_CLIP_14 = 8159
# upper bounds of the 8 mu-law segments, on 14-bit magnitudes (+ bias)
_SEGMENT_ENDS = np.array([0x3F, 0x7F, 0xFF, 0x1FF, 0x3FF, 0x7FF, 0xFFF, 0x1FFF], dtype=np.int32)


def encode(pcm: np.ndarray) -> bytes:
    """int16 PCM samples -> mu-law bytes (one byte per sample)."""
    x = np.asarray(pcm, dtype=np.int16).astype(np.int32) >> 2             # 14-bit
    negative = x < 0
    magnitude = np.minimum(np.where(negative, -x, x), _CLIP_14) + (_BIAS >> 2)
    segment = np.searchsorted(_SEGMENT_ENDS, magnitude, side="left")      # first end >= mag
    mantissa = (magnitude >> (np.minimum(segment, 7) + 1)) & 0x0F
    code = np.where(segment >= 8, 0x7F, (segment << 4) | mantissa)
    mask = np.where(negative, 0x7F, 0xFF)
    return (code ^ mask).astype(np.uint8).tobytes()


def decode(data: bytes) -> np.ndarray:
    """mu-law bytes -> int16 PCM samples."""
    u = ~np.frombuffer(data, dtype=np.uint8).astype(np.int32) & 0xFF
    t = (((u & 0x0F) << 3) + _BIAS) << ((u & 0x70) >> 4)
    return np.where(u & 0x80, _BIAS - t, t - _BIAS).astype(np.int16)


_TABLE = decode(bytes(range(256)))  # [256] int16: every code decoded once


def decode_fast(data: bytes) -> np.ndarray:
    """mu-law bytes -> int16 PCM samples, by table (same values as `decode`)."""
    return _TABLE[np.frombuffer(data, dtype=np.uint8)]
