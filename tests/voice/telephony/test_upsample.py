"""voice.telephony.upsample: the streaming 8 -> 16 kHz interpolator gives, for frames of any
sizes, exactly the whole-stream definition; it passes the telephone band flat and rejects the
images that naive zero-stuffing would leave."""

import numpy as np

from diffvoice.voice.telephony.upsample import Upsampler2x, upsample_ref


def test_streaming_equals_the_whole_stream_definition_for_any_frame_sizes():
    rng = np.random.default_rng(7)
    pcm = np.concatenate([rng.integers(-32768, 32768, 3000),
                          rng.normal(0, 800, 3000).astype(int)]).astype(np.int16)
    reference = upsample_ref(pcm)
    for sizes in ([160] * 40, [1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233, 377, 610],
                  list(rng.integers(0, 400, 60))):
        up, out, start = Upsampler2x(), [], 0
        for size in sizes:
            out.append(up.process(pcm[start:start + size]))
            start += size
        out.append(up.process(pcm[start:]))
        assert np.array_equal(np.concatenate(out), reference)


def _gain_db(freq_in: float, freq_out: float) -> float:
    t = np.arange(8000) / 8000.0
    tone = (10000 * np.sin(2 * np.pi * freq_in * t)).astype(np.int16)
    y = Upsampler2x().process(tone)[400:].astype(np.float64)  # past the start-up
    spectrum = np.abs(np.fft.rfft(y * np.hanning(len(y))))
    freqs = np.fft.rfftfreq(len(y), 1 / 16000.0)
    at = lambda f: spectrum[np.argmin(np.abs(freqs - f))]  # noqa: E731
    return 20 * np.log10(at(freq_out) / at(freq_in))


def test_telephone_band_is_flat_and_images_are_rejected():
    for f in (300, 1000, 2000, 3000, 3400):
        # the tone itself keeps its level (vs the same tone through the reference filter gain)
        t = np.arange(8000) / 8000.0
        tone = (10000 * np.sin(2 * np.pi * f * t)).astype(np.int16)
        y = Upsampler2x().process(tone)[400:].astype(np.float64)
        rms_in = np.sqrt(np.mean(tone[200:].astype(np.float64) ** 2))
        assert abs(20 * np.log10(np.sqrt(np.mean(y ** 2)) / rms_in)) < 0.1, f
        assert _gain_db(f, 8000 - f) < -60, f  # the image zero-stuffing puts at 8 kHz - f
