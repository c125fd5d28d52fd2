"""One self-contained HTML page for a latency report: tables plus the PNG plots inlined.

Contract: `render_html(report, images) -> str`, where `images` maps a title to PNG bytes. The page
has no external references at all (no scripts, fonts, stylesheets or image URLs; plots are
`data:image/png;base64,...`), so it can be mailed or attached to a design review as one file.
Every report string is HTML-escaped (jinja2 autoescape). Pure function of its inputs.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

import jinja2

from diffvoice.latency_bench.markdown import fmt_fraction, fmt_stat
from diffvoice.latency_bench.quality import has_turns, sweep_quality
from diffvoice.latency_bench.report import (
    SAMPLE_SIZE_RULE,
    STAGE_DESCRIPTIONS,
    stage_names,
    sweep_tail,
)
from diffvoice.latency_bench.stats import SUMMARY_FIELDS

_TEMPLATE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>diffvoice latency report: {{ kind }}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: .6em 0 1.4em; }
.wide { max-width: 100%; overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: .25em .6em; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
th { background: #f3f3f3; } code { background: #f6f6f6; padding: 0 .2em; }
img { max-width: 100%; border: 1px solid #eee; } .notes { max-width: 60em; }
</style></head><body>
<h1>Latency report: {{ kind }}</h1>
<ul>
{% for label, value in header %}<li><b>{{ label }}</b>: {{ value }}</li>
{% endfor %}</ul>
{% if descriptions %}<p>Stages (milliseconds):</p><ul>
{% for name, text in descriptions %}<li><code>{{ name }}</code>: {{ text }}</li>
{% endfor %}</ul>{% endif %}
<h2>p50 / {{ tail }} versus concurrency</h2>
<div class="wide"><table><tr><th>concurrency</th><th>turns</th><th>errors</th><th>timeouts</th>
{% for name in names %}<th>{{ name }}<br>p50 / {{ tail }} (n)</th>{% endfor %}
{% for head in quality_heads %}<th>{{ head }}</th>{% endfor %}</tr>
{% for row in sweep_rows %}<tr>{% for cell in row %}<td class="n">{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
<p><i>Sample size: {{ rule }}.</i></p>
{% if quality_heads %}<p><i>Quality: ASR WER = word error rate of the final transcript against
the prompt's text; task success = answers that state the prompt's expected fact; n = turns
judged.</i></p>{% endif %}
{% if notes %}<p class="notes">{{ notes }}</p>{% endif %}
{% if analysis %}<p>Computed from the samples:</p><ul>
{% for line in analysis %}<li>{{ line }}</li>{% endfor %}</ul>{% endif %}
{% for title, uri in images %}<h2>{{ title }}</h2><img alt="{{ title }}" src="{{ uri }}">
{% endfor %}
{% for point in points %}<h2>{{ point.title }}</h2><p>{{ point.extra }}</p>
<div class="wide"><table><tr><th>stage</th>{% for f in fields %}<th>{{ f }}</th>{% endfor %}</tr>
{% for row in point.rows %}<tr><td>{{ row[0] }}</td>
{% for cell in row[1:] %}<td class="n">{{ cell }}</td>{% endfor %}</tr>
{% endfor %}</table></div>
{% for message in point.errors %}<p>error: {{ message }}</p>{% endfor %}
{% endfor %}
</body></html>
"""

_ENV = jinja2.Environment(autoescape=True, undefined=jinja2.StrictUndefined)


def _header(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    config = report["config"]
    header = [("created", str(report["created"]))] if "created" in report else []
    server = config.get("server") if isinstance(config.get("server"), Mapping) else {}
    where = "load generator " if server else ""
    described = [(f"server {k}", server[k]) for k in ("machine", "versions") if server.get(k)]
    for key in ("model", "asr", "tts", "stop_secs", "protocol", "url", "corpus",
                "turns_per_session", "command", "machine", "versions"):
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, Mapping):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        elif isinstance(value, list | tuple):
            value = ", ".join(str(v) for v in value)
        label = f"{where}{key}" if key in ("machine", "versions") else key
        header.append((label, str(value)))
    for label, value in described:  # --url mode: the server's own description (/healthz)
        if isinstance(value, Mapping):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        header.append((label, str(value)))
    return header


def render_html(report: Mapping[str, Any], images: Mapping[str, bytes | None]) -> str:
    names = stage_names(report)
    sweep_rows = []
    points = []
    quality = sweep_quality(report) if has_turns(report) else None
    tail = sweep_tail(report)
    for point in report["sweep"]:
        row = [point["concurrency"], point.get("turns", "–"), point.get("errors", "–"),
               point.get("timeouts", "–")]
        for name in names:
            summary = point["stages"].get(name)
            row.append("–" if not summary or not summary["count"] else
                       f"{fmt_stat(summary, 'p50')} / {fmt_stat(summary, tail)} "
                       f"({summary['count']})")
        if quality:
            q = quality[point["concurrency"]]
            row += [fmt_fraction(q["wer"], q["wer_turns"]),
                    fmt_fraction(q["task_success"], q["task_turns"])]
        sweep_rows.append(row)
        rows = []
        for name in names:
            summary = point["stages"].get(name)
            if summary is not None:
                rows.append([name, summary["count"]]
                            + [fmt_stat(summary, f) for f in SUMMARY_FIELDS[1:]])
        extra = ", ".join(f"{k}: {point[k]}" for k in ("turns", "errors", "timeouts")
                          if k in point)
        if point.get("wall_s") is not None:
            extra += f", wall: {point['wall_s']:.0f} s"
        plural = "s" if point["concurrency"] != 1 else ""
        points.append({"title": f"{point['concurrency']} concurrent session{plural}",
                       "extra": extra, "rows": rows,
                       "errors": point.get("error_messages", [])[:5]})
    inlined = [(title, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
               for title, png in images.items() if png]
    return _ENV.from_string(_TEMPLATE).render(
        kind=report.get("kind", "latency"), header=_header(report),
        descriptions=[(n, STAGE_DESCRIPTIONS[n]) for n in names if n in STAGE_DESCRIPTIONS],
        names=names, sweep_rows=sweep_rows, tail=tail, notes=report.get("notes"),
        rule=SAMPLE_SIZE_RULE,
        quality_heads=["ASR WER (n)", "task success (n)"] if quality else [],
        analysis=report.get("analysis", []), images=inlined, points=points,
        fields=SUMMARY_FIELDS)
