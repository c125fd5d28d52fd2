"""Write every output of a latency report next to its JSON file.

Contract: `write_outputs(report, json_path)` validates the report and writes, for
`json_path = DIR/NAME.json`:

    DIR/NAME.json               the report (schema diffvoice.latency/1)
    DIR/NAME.md                 Markdown tables, linking the PNGs by relative name
    DIR/NAME-cdf.png            latency CDF per stage (needs raw samples)
    DIR/NAME-concurrency.png    p50/p99 versus concurrency (needs >= 2 sweep points)
    DIR/NAME.html               one self-contained page (PNGs inlined as base64)

It returns {"json"|"md"|"cdf"|"concurrency"|"html": Path} for what it wrote; a plot the report
cannot support is skipped, not faked. Used by both `bench voice` and `bench engine`, and by
`bench render` to regenerate everything from an edited JSON (e.g. after adding `notes`).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from diffvoice.latency_bench.html import render_html
from diffvoice.latency_bench.markdown import render_markdown
from diffvoice.latency_bench.plots import cdf_png, concurrency_png
from diffvoice.latency_bench.report import save_report, validate_report


def write_outputs(report: Mapping[str, Any], json_path: str | Path) -> dict[str, Path]:
    validate_report(report)
    json_path = Path(json_path)
    if json_path.suffix != ".json":
        raise ValueError(f"--out must name a .json file, got {json_path}")
    stem = json_path.with_suffix("")
    written = {"json": save_report(report, json_path)}
    images: dict[str, bytes | None] = {
        "Latency CDF per stage": cdf_png(report),
        "p50 and p99 versus concurrency": concurrency_png(report),
    }
    links: dict[str, str] = {}
    for key, (title, png) in zip(("cdf", "concurrency"), images.items(), strict=True):
        path = Path(f"{stem}-{key}.png")
        if png is None:
            path.unlink(missing_ok=True)   # never leave a stale plot from an earlier run
            continue
        path.write_bytes(png)
        written[key] = path
        links[title] = path.name
    md_path = Path(f"{stem}.md")  # not with_suffix: "run-0.2.json" is "run-0.2.md"
    md_path.write_text(render_markdown(report, links), encoding="utf-8")
    written["md"] = md_path
    html_path = Path(f"{stem}.html")
    html_path.write_text(render_html(report, images), encoding="utf-8")
    written["html"] = html_path
    return written
