"""latency_bench.compare: the side-by-side table reads each report's own numbers."""

from __future__ import annotations

import json

from diffvoice.latency_bench.compare import main, render


def _report(p50: float, n: int) -> dict:
    stage = {"count": n, "mean": p50, "p50": p50, "p90": p50 * 1.5, "p95": None, "p99": None,
             "max": p50 * 2}  # fmt: skip
    sweep = [{"concurrency": c, "turns": n, "errors": 1, "timeouts": 0,
              "stages": {"voice_to_voice_ms": {**stage, "p50": p50 * c}}}
             for c in (1, 2)]  # fmt: skip
    return {"schema": "diffvoice.latency/1", "kind": "voice", "config": {}, "stages": {},
            "sweep": sweep}  # fmt: skip


def test_rows_ratios_and_sample_rule(tmp_path):
    text = render([_report(400.0, 30), _report(500.0, 10)], ["one", "ray"])
    assert "| 1 | one | 30 | 1 | 30 | 400 | 600 | 1.00x |" in text
    # second report: 10 samples, so no p90; its p50 is 1.25x the first's
    assert "| 1 | ray | 10 | 1 | 10 | 500 | n/a | 1.25x |" in text
    assert "| 2 | ray | 10 | 1 | 10 | 1,000 | n/a | 1.25x |" in text


def test_cli_writes_markdown(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(_report(300.0, 25)))
    b.write_text(json.dumps(_report(330.0, 25)))
    out = tmp_path / "cmp.md"
    assert main([str(a), str(b), "--labels", "x,y", "--out", str(out), "--title", "T"]) == 0
    assert out.read_text().startswith("# T") and "1.10x" in out.read_text()
