"""Percentile maths for latency reports: one definition, used everywhere.

Contract:
- `percentile(samples, q)` is the linear-interpolation percentile (Hyndman & Fan type 7, the
  default of `numpy.percentile`): sort the n samples, take rank `h = (n - 1) * q / 100`, and
  interpolate between the samples at `floor(h)` and `ceil(h)`. `q` is in [0, 100].
- `summarize(samples)` gives the stage summary every report uses:
  `{count, mean, p50, p90, p95, p99, max}`. An empty sample gives `count = 0` and `None` for every
  other field (JSON `null`): "not measured" must never print as 0 ms.
- Samples are finite real numbers (milliseconds by convention); NaN or infinity is a caller bug
  and raises `ValueError` rather than silently poisoning a percentile.

This module knows nothing about voice, sessions or the report format; it is plain Python so the
tests can check it against numpy as an independent reference.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

# The summary fields, in the order reports print them.
SUMMARY_FIELDS: tuple[str, ...] = ("count", "mean", "p50", "p90", "p95", "p99", "max")
PERCENTILES: tuple[tuple[str, float], ...] = (("p50", 50.0), ("p90", 90.0), ("p95", 95.0),
                                              ("p99", 99.0))


def _checked(samples: Iterable[float]) -> list[float]:
    values = [float(x) for x in samples]
    for x in values:
        if not math.isfinite(x):
            raise ValueError(f"latency samples must be finite numbers, got {x!r}")
    return values


def percentile_sorted(sorted_values: list[float], q: float) -> float:
    """Type-7 percentile of an already sorted, non-empty list (no copy, no checks on order)."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample is undefined")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be in [0, 100], got {q!r}")
    rank = (len(sorted_values) - 1) * q / 100.0
    lower = math.floor(rank)
    upper = min(lower + 1, len(sorted_values) - 1)
    weight = rank - lower
    low_value, high_value = sorted_values[lower], sorted_values[upper]
    # Written as a + w*(b-a) like numpy, so equal neighbours give the value exactly.
    return low_value + weight * (high_value - low_value)


def percentile(samples: Iterable[float], q: float) -> float:
    """Type-7 (numpy default) percentile of `samples`; `q` in [0, 100]."""
    return percentile_sorted(sorted(_checked(samples)), q)


def summarize(samples: Iterable[float]) -> dict[str, float | int | None]:
    """`{count, mean, p50, p90, p95, p99, max}` of the samples (None fields when empty)."""
    values = sorted(_checked(samples))
    if not values:
        return {"count": 0, **{name: None for name in SUMMARY_FIELDS[1:]}}
    summary: dict[str, float | int | None] = {
        "count": len(values),
        "mean": math.fsum(values) / len(values),
    }
    for name, q in PERCENTILES:
        summary[name] = percentile_sorted(values, q)
    summary["max"] = values[-1]
    return summary


def ecdf(samples: Iterable[float]) -> tuple[list[float], list[float]]:
    """Empirical CDF: sorted values and the fraction of samples <= each (for plots)."""
    values = sorted(_checked(samples))
    n = len(values)
    return values, [(i + 1) / n for i in range(n)]
