"""kernels/bench.py: the dry run works end to end, and the engine hook reports honestly."""

import json
import sys

import pytest

from diffvoice.kernels import bench
from diffvoice.kernels._triton import HAS_TRITON, can_interpret


@pytest.mark.skipif(not (HAS_TRITON and can_interpret()), reason="needs the Triton interpreter")
def test_dry_run_checks_every_kernel_and_writes_reports(tmp_path):
    assert bench.main(["--out", str(tmp_path), "--dry-run"]) == 0
    report = json.loads((tmp_path / "kernels.json").read_text())
    assert {r["kernel"] for r in report["kernels"]} == {
        "unmask_confidence", "block_attention", "rmsnorm", "rotary"}
    assert all(r["ok"] and r["triton_us"] > 0 and r["max_err"] <= r["bound"]
               for r in report["kernels"])
    assert report["engine"]["status"] == "skipped (dry run)"
    assert "engine_bench --preset qwen2.5-1.5b" in report["engine"]["command"]
    table = (tmp_path / "kernels.md").read_text()
    assert table.count("| ok |") == len(report["kernels"])


def test_engine_hook_includes_json_on_success_and_tail_on_failure(tmp_path, monkeypatch):
    writer = ("import json, sys; json.dump({'first_block_ms': 4.2}, "
              f"open({str(tmp_path / 'engine.json')!r}, 'w'))")
    monkeypatch.setattr(bench, "engine_bench_command", lambda out: [sys.executable, "-c", writer])
    record = bench.run_engine_bench(tmp_path, timeout_s=60)
    assert record["status"] == "ok" and record["result"] == {"first_block_ms": 4.2}

    (tmp_path / "engine.json").unlink()
    failing = [sys.executable, "-c", "import sys; print('no such preset'); sys.exit(3)"]
    monkeypatch.setattr(bench, "engine_bench_command", lambda out: failing)
    record = bench.run_engine_bench(tmp_path, timeout_s=60)
    assert record["status"] == "failed" and record["returncode"] == 3
    assert "no such preset" in record["output_tail"] and "result" not in record
