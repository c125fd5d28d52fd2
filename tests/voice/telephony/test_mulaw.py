"""voice.telephony.mulaw against CPython's audioop (the reference G.711 implementation)."""

import warnings

import numpy as np
import pytest

from diffvoice.voice.telephony import mulaw

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop")   # removed in Python 3.13


def test_encode_decode_bit_exact_with_audioop():
    rng = np.random.default_rng(0)
    pcm = np.concatenate([
        rng.integers(-32768, 32768, size=4001),                 # full range
        (rng.normal(0, 300, size=999)).astype(int),             # quiet speech-like
        [0, 1, -1, 2, -2, 32767, -32768, 8159 * 4, -8160 * 4],  # edges and the clip point
    ]).astype(np.int16)
    ours = mulaw.encode(pcm)
    assert ours == audioop.lin2ulaw(pcm.tobytes(), 2)
    every_code = bytes(range(256))
    assert mulaw.decode(every_code).tobytes() == audioop.ulaw2lin(every_code, 2)
    assert mulaw.decode(ours).tobytes() == audioop.ulaw2lin(ours, 2)
    assert mulaw.decode_fast(ours).tobytes() == audioop.ulaw2lin(ours, 2)
    random_codes = rng.integers(0, 256, size=1601).astype(np.uint8).tobytes()
    assert mulaw.decode_fast(random_codes).tobytes() == audioop.ulaw2lin(random_codes, 2)
