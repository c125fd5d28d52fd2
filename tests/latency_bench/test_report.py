"""Report schema, Markdown/HTML/PNG outputs written from a random report."""

import base64
import json
import re

import numpy as np
import pytest

from diffvoice.latency_bench.outputs import write_outputs
from diffvoice.latency_bench.report import (
    VOICE_STAGES,
    SweepPoint,
    build_report,
    load_report,
    validate_report,
)


def _random_points(rng, levels=(1, 2, 4)):
    points = []
    for level in levels:
        samples = {s: (rng.lognormal(5.5, 0.5, size=12 * level) * level).tolist()
                   for s in VOICE_STAGES[:-1]}
        samples["server_ms"] = []          # a stage never measured at this level
        points.append(SweepPoint(concurrency=level, samples=samples, turns=12 * level + 1,
                                 errors=1, timeouts=0, wall_s=10.0 * level,
                                 error_messages=["session 0 turn 3: <closed> 1011"]))
    return points


def test_build_report_schema_and_headline():
    rng = np.random.default_rng(0)
    points = _random_points(rng)
    report = build_report(kind="voice", config={"model": "m", "stop_secs": 0.5},
                          points=list(reversed(points)))
    validate_report(report)
    assert [p["concurrency"] for p in report["sweep"]] == [1, 2, 4]
    assert report["stages"] == report["sweep"][0]["stages"]      # headline = lowest level
    assert list(report["stages"]) == list(VOICE_STAGES)          # pipeline order
    v2v = report["sweep"][2]["stages"]["voice_to_voice_ms"]
    assert v2v["count"] == 48
    assert v2v["p99"] == pytest.approx(np.percentile(points[2].samples["voice_to_voice_ms"], 99))
    assert report["sweep"][0]["stages"]["server_ms"]["p50"] is None
    json.dumps(report, allow_nan=False)                          # strict JSON


@pytest.mark.parametrize("mutate, message", [
    (lambda r: r.pop("sweep"), "sweep"),
    (lambda r: r["sweep"].reverse(), "ascending"),
    (lambda r: r["stages"]["asr_ms"].update(p99=-1.0), "must not decrease"),
    (lambda r: r["stages"]["server_ms"].update(p50=0.0), "null when count is 0"),
    (lambda r: r["stages"]["asr_ms"].pop("p95"), "exactly the fields"),
    (lambda r: r.update(schema="other/9"), "unsupported schema"),
])
def test_validate_names_the_broken_field(mutate, message):
    report = build_report(kind="voice", config={}, points=_random_points(
        np.random.default_rng(1)))
    mutate(report)
    with pytest.raises(ValueError, match=message):
        validate_report(report)


def test_sweep_point_rejects_inconsistent_counts():
    with pytest.raises(ValueError, match="exceed"):
        SweepPoint(concurrency=1, turns=1, errors=1, timeouts=1)
    with pytest.raises(ValueError, match="concurrency"):
        SweepPoint(concurrency=0)


def test_write_outputs_round_trip(tmp_path):
    rng = np.random.default_rng(2)
    report = build_report(kind="voice", config={"model": "tiny", "asr": "pocketsphinx",
                                                "tts": "espeak", "stop_secs": 0.5},
                          points=_random_points(rng), notes="Tail <b>dominated</b> by ASR.",
                          analysis=["asr_ms has the largest p99"])
    written = write_outputs(report, tmp_path / "voice.json")
    assert set(written) == {"json", "md", "cdf", "concurrency", "html"}
    assert load_report(written["json"]) == report
    for key in ("cdf", "concurrency"):
        assert written[key].read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    md = written["md"].read_text()
    summary = report["sweep"][1]["stages"]["llm_ttft_ms"]     # n = 24: p50/p90/p95, no p99
    assert summary["count"] == 24
    assert (f"| llm_ttft_ms | 24 | {summary['mean']:,.0f} | {summary['p50']:,.0f} | "
            f"{summary['p90']:,.0f} | {summary['p95']:,.0f} | n/a | {summary['max']:,.0f} |") in md
    # the sweep table's tail is the highest percentile every level supports: 12 turns -> p90
    assert "## p50 / p90 versus concurrency" in md and "p50 / p99" not in md
    assert f"{summary['p50']:,.0f} / {summary['p90']:,.0f} (24)" in md  # and shows n
    assert "p99 from n >= 100" in md
    assert "| 4 | 49 | 1 | 0 |" in md                       # turns/errors/timeouts per level
    assert "voice-cdf.png" in md and "Tail <b>dominated</b> by ASR." in md
    html = written["html"].read_text()
    assert "Tail &lt;b&gt;dominated&lt;/b&gt; by ASR." in html   # escaped
    assert "p50 / p90 (n)" in html and "p50 / p99" not in html
    assert html.count('<div class="wide"><table>') == 4  # tables scroll, the page does not
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)  # self-contained
    images = re.findall(r'src="data:image/png;base64,([^"]+)"', html)
    assert len(images) == 2
    assert base64.b64decode(images[0]) == written["cdf"].read_bytes()


def test_single_point_without_samples_skips_plots(tmp_path):
    report = build_report(kind="engine", config={}, keep_samples=False, points=[
        SweepPoint(concurrency=1, samples={"ttft_ms": [1.0, 2.0, 3.0]}, turns=3)])
    (tmp_path / "e-cdf.png").write_bytes(b"stale")
    written = write_outputs(report, tmp_path / "e.json")
    assert set(written) == {"json", "md", "html"}
    assert not (tmp_path / "e-cdf.png").exists()
    assert "| ttft_ms | 3 | 2 | 2 |" in written["md"].read_text()


def test_outputs_keep_every_dot_of_the_name(tmp_path):
    """Two runs named by a setting ("-0.1", "-0.2") write four reports, none over another's."""
    report = build_report(kind="engine", config={}, keep_samples=False, points=[
        SweepPoint(concurrency=1, samples={"ttft_ms": [1.0, 2.0, 3.0]}, turns=3)])
    for name in ("pause-0.1", "pause-0.2"):
        written = write_outputs(report, tmp_path / f"{name}.json")
        assert {written[k].name for k in ("json", "md", "html")} == \
            {f"{name}.json", f"{name}.md", f"{name}.html"}
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "pause-0.1.html", "pause-0.1.json", "pause-0.1.md",
        "pause-0.2.html", "pause-0.2.json", "pause-0.2.md"]


def test_sweep_tail_is_what_the_smallest_level_supports():
    from diffvoice.latency_bench.report import sweep_tail

    def report(*counts):
        return {"sweep": [{"stages": {"voice_to_voice_ms": {"count": c}, "asr_ms": None}}
                          for c in counts]}

    assert [sweep_tail(report(*c)) for c in ((100, 400), (99, 400), (20,), (10, 12), (9, 100))] \
        == ["p99", "p95", "p95", "p90", "max"]
