"""latency_bench.stats against numpy on random samples."""

import math

import numpy as np
import pytest

from diffvoice.latency_bench.stats import ecdf, percentile, summarize


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100, 1001])
def test_percentile_matches_numpy_linear(n):
    rng = np.random.default_rng(n)
    # latency-like: lognormal body plus a few large outliers, and some exact ties
    samples = rng.lognormal(mean=6.0, sigma=0.6, size=n)
    samples[: n // 10] = samples[0]
    qs = np.concatenate([[0, 50, 90, 95, 99, 100], rng.uniform(0, 100, size=20)])
    for q in qs:
        assert percentile(samples.tolist(), float(q)) == pytest.approx(
            float(np.percentile(samples, q)), rel=1e-12, abs=1e-9)


def test_summarize_matches_numpy():
    rng = np.random.default_rng(7)
    samples = rng.gamma(2.0, 150.0, size=537)
    summary = summarize(samples.tolist())
    assert summary["count"] == 537
    assert summary["mean"] == pytest.approx(samples.mean(), rel=1e-12)
    assert summary["max"] == samples.max()
    for name, q in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        assert summary[name] == pytest.approx(np.percentile(samples, q), rel=1e-12)
    chain = [summary[k] for k in ("p50", "p90", "p95", "p99", "max")]
    assert chain == sorted(chain)


def test_empty_sample_is_null_not_zero():
    assert summarize([]) == {"count": 0, "mean": None, "p50": None, "p90": None, "p95": None,
                             "p99": None, "max": None}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_sample_is_rejected(bad):
    with pytest.raises(ValueError, match="finite"):
        summarize([1.0, bad])


def test_bad_q_and_empty_percentile():
    with pytest.raises(ValueError, match="q must be"):
        percentile([1.0, 2.0], 101)
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)


def test_ecdf_is_sorted_and_ends_at_one():
    rng = np.random.default_rng(3)
    values = rng.normal(size=50).tolist()
    xs, ys = ecdf(values)
    assert xs == sorted(values)
    assert ys[-1] == 1.0 and ys[0] == pytest.approx(1 / 50)
    assert all(b > a for a, b in zip(ys, ys[1:], strict=False))
