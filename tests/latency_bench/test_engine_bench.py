"""`diffvoice bench engine` end to end on a tiny run: the report holds what the issue asks for,
in the shared schema, with engine and vanilla answers of equal length."""

import json

from diffvoice.engine.cli import main
from diffvoice.latency_bench.report import load_report


def test_bench_engine_writes_the_documented_fields(tmp_path):
    out = tmp_path / "engine.json"
    assert main(["bench", "engine", "--prompts", "2", "--answer-tokens", "8", "--batch", "1,2",
                 "--context", "48", "--host-batches", "1,2", "--aten-ops-preset", "tiny-10m",
                 "--out", str(out)]) == 0
    report = load_report(out)  # validates schema diffvoice.latency/1
    raw = json.loads(out.read_text())
    assert {"p50", "p90", "p99"} <= set(raw["ttft_ms"]) and raw["ttft_ms"]["p50"] > 0
    assert raw["tok_per_s"] > 0 and raw["vanilla"]["tok_per_s"] > 0
    assert raw["speedup_vs_vanilla"] == raw["tok_per_s"] / raw["vanilla"]["tok_per_s"]
    assert raw["mean_answer_tokens"] == {"engine": 8.0, "vanilla": 8.0}
    assert raw["batch2"]["aggregate_tok_per_s"] > 0
    ref = raw["reference_loop"]  # the family's own loop (SDAR's, the preset's family)
    assert ref["tok_per_s"] > 0 and ref["policy"] == "sdar_static" and ref["answers"] == 2
    assert raw["speedup_vs_reference_loop"] == raw["tok_per_s"] / ref["tok_per_s"]
    assert 0 <= ref["answers_identical"] <= 2 and ref["tokens"] == 16
    ctx = raw["by_context"]["48"]
    assert ctx["prompt_tokens"] >= 48 and ctx["next_turn_reused_tokens_mean"] >= 8
    assert report["config"]["model"]["params"] > 5_000_000
    for name in ("machine", "versions", "command"):
        assert report["config"][name]
    assert (tmp_path / "engine.md").is_file() and (tmp_path / "engine.html").is_file()
    # the worker's own work (issue 40): SDAR's fixed schedule reads the device once a block
    assert set(raw["host_reads_per_block"]) == {"1", "2"}
    assert all(0 < r <= 1 for r in raw["host_reads_per_block"].values())
    assert all(b >= 0 for b in raw["plan_builds_per_pass"].values())
    # every pass finds a plan: built (a new shape) or re-anchored (new prompts: new positions)
    assert all(raw["plan_builds_per_pass"][b] + raw["plan_binds_per_pass"][b] > 0
               for b in ("1", "2"))
    assert all(us > 0 for us in raw["host_us_per_pass"].values())
    assert raw["host_profile"]["2"]["passes"] > 0
    ops = raw["aten_ops_per_pass_2_layers"] - raw["aten_ops_per_pass_1_layer"]
    assert raw["aten_ops_per_layer_pass"] == ops > 10
    assert 0 < raw["device_ops_per_layer_pass"] <= raw["aten_ops_per_layer_pass"]
