"""The soak's RSS growth compares the warm-up's last minute with the soak's last minute (both
with every caller on the line) by their highest samples: an allocator trim right after the
warm-up must not read as growth, and a real climb must."""

from diffvoice.latency_bench.reliability.soak import RSS, rss_growth

MB = 2**20


def _samples(rss_mb):
    return [{"t": 10.0 * i, RSS: mb * MB} for i, mb in enumerate(rss_mb)]


def test_a_trim_dip_after_the_warm_up_is_not_growth():
    # t = 0..590 s: ramp, a flat 950 MB, a trim to 888 MB at 130 s, back to 950 MB
    rss = [700, 800, 900, 940, 945, 950, 950, 950, 950, 950, 950, 950, 952, 888, 900, 910]
    rss += [940] * 20 + [950] * 24
    growth, warm, end = rss_growth(_samples(rss), warmup=120.0, duration=600.0)
    assert warm[RSS] == 950 * MB and end[RSS] == 950 * MB
    assert abs(growth) < 1e-9


def test_a_steady_climb_is_growth():
    rss = [900 + 2 * i for i in range(60)]  # +2 MB every 10 s
    growth, warm, end = rss_growth(_samples(rss), warmup=120.0, duration=600.0)
    assert warm["t"] == 110.0 and end["t"] == 590.0
    assert abs(growth - (1018 - 922) / 922) < 1e-9


def test_a_run_shorter_than_the_windows_uses_single_samples():
    samples = [{"t": -2.0, RSS: 500 * MB}, {"t": 8.0, RSS: 510 * MB}, {"t": 12.0, RSS: 520 * MB}]
    growth, warm, end = rss_growth(samples, warmup=3.0, duration=10.0)
    assert (warm["t"], end["t"]) == (8.0, 12.0) and abs(growth - 10 / 510) < 1e-9
