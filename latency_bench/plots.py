"""PNG plots of a latency report: latency CDF per stage, and p50/p99 versus concurrency.

The concurrency plot's dashed tail line is p99 when every level has >= 100 samples, else p90,
each point drawn only where the sample-size rule allows it (report.PERCENTILE_MIN_SAMPLES); its
legend sits outside the axes.

Contract: `cdf_png(report)` and `concurrency_png(report)` return PNG bytes (or None when the
report lacks what the plot needs: raw `samples` for the CDF, two or more sweep points for the
concurrency plot). They use matplotlib's object API (`Figure`, no pyplot global state, no
display), so they are safe in threads and on headless machines. Pure functions of the report.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import NullFormatter

from diffvoice.latency_bench.report import PERCENTILE_MIN_SAMPLES, enough_samples, stage_names
from diffvoice.latency_bench.stats import ecdf

_DPI = 110


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=_DPI, bbox_inches="tight")
    return buffer.getvalue()


def _caption(report: Mapping[str, Any]) -> str:
    config = report["config"]
    parts = [str(config[k]) for k in ("model", "asr", "tts") if config.get(k)]
    if config.get("stop_secs") is not None:
        parts.append(f"stop_secs={config['stop_secs']}")
    return " | ".join(parts)


def cdf_png(report: Mapping[str, Any]) -> bytes | None:
    """One panel per stage: the empirical CDF of its samples, one curve per concurrency."""
    samples = report.get("samples")
    if not samples:
        return None
    names = [n for n in stage_names(report)
             if any(samples.get(str(p["concurrency"]), {}).get(n) for p in report["sweep"])]
    if not names:
        return None
    columns = 3 if len(names) > 4 else 2 if len(names) > 1 else 1
    rows = math.ceil(len(names) / columns)
    figure = Figure(figsize=(4.2 * columns, 3.2 * rows))
    for index, name in enumerate(names):
        axes = figure.add_subplot(rows, columns, index + 1)
        panel: list[float] = []
        for point in report["sweep"]:
            values = samples.get(str(point["concurrency"]), {}).get(name) or []
            if not values:
                continue
            xs, ys = ecdf(values)
            panel += xs
            axes.step(xs, ys, where="post", label=f"{point['concurrency']} conc.")
        axes.set_title(name, fontsize=10)
        axes.set_xlabel("ms")
        positive = [x for x in panel if x > 0]
        if positive and len(positive) == len(panel) and max(positive) / min(positive) > 10:
            axes.set_xscale("log")                 # a saturated level would flatten the rest
            axes.xaxis.set_minor_formatter(NullFormatter())
            axes.set_xlabel("ms (log scale)")
        axes.set_ylabel("fraction of turns")
        axes.set_ylim(0, 1.02)
        axes.axhline(0.99, color="grey", linewidth=0.6, linestyle=":")
        axes.grid(alpha=0.3)
        if axes.get_lines():
            axes.legend(fontsize=7, loc="lower right")
    figure.suptitle(f"Latency CDF per stage   {_caption(report)}", fontsize=10)
    figure.tight_layout()
    return _png(figure)


def concurrency_png(report: Mapping[str, Any]) -> bytes | None:
    """p50 (solid) and p99 (dashed) of every stage against the number of concurrent sessions."""
    sweep = report["sweep"]
    if len(sweep) < 2:
        return None
    figure = Figure(figsize=(9.5, 4.5))
    axes = figure.add_subplot(1, 1, 1)
    levels = [p["concurrency"] for p in sweep]
    # the tail line: p99 when every level has the samples for it, else p90 (the sample-size
    # rule: a p99 of a few dozen turns is only an interpolation near the max)
    tail = "p99" if all(enough_samples(s, "p99") for p in sweep for s in p["stages"].values()
                        if s and s.get("count")) else "p90"
    for index, name in enumerate(stage_names(report)):
        color = f"C{index % 10}"
        for field, style in (("p50", "-"), (tail, "--")):
            xs, ys = [], []
            for point in sweep:
                summary = point["stages"].get(name)
                if enough_samples(summary, field):   # too few samples: no point drawn
                    xs.append(point["concurrency"])
                    ys.append(summary[field])
            if xs:
                axes.plot(xs, ys, style, marker="o", markersize=3, color=color,
                          label=f"{name} {field}")
    axes.set_xscale("log", base=2)
    axes.set_xticks(levels, [str(c) for c in levels])
    axes.set_xlabel("concurrent sessions")
    axes.set_ylabel("ms")
    values = [y for line in axes.get_lines() for y in line.get_ydata() if y > 0]
    if values and max(values) / min(values) > 30:     # a saturated level would flatten the rest
        axes.set_yscale("log")
        axes.yaxis.set_minor_formatter(NullFormatter())
        axes.set_ylabel("ms (log scale)")
    minimum = PERCENTILE_MIN_SAMPLES[tail]
    axes.set_title(f"p50 (solid) and {tail} (dashed; drawn where n >= {minimum}) vs "
                   f"concurrency\n{_caption(report)}", fontsize=9)
    axes.grid(alpha=0.3)
    # the legend sits outside the axes, right of the plot, so it never covers a line
    axes.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                borderaxespad=0.0)
    figure.tight_layout()
    return _png(figure)
