"""latency_bench/engine_profile.py on CPU: it decodes every wave it profiles and writes its report
(the device-time columns are zero without CUDA; the GPU run fills them)."""

import json

from diffvoice.latency_bench import engine_profile


def test_profile_writes_every_level(tmp_path):
    out = tmp_path / "profile"
    assert engine_profile.main(["--out", str(out), "--preset", "tiny-10m", "--device", "cpu",
                                "--dtype", "float32", "--batch", "1,2", "--prompts", "2",
                                "--block-size", "8"]) == 0
    report = json.loads((out / "profile.json").read_text())
    levels = {lv["batch"]: lv for lv in report["levels"]}
    assert set(levels) == {1, 2}
    assert levels[1]["requests"] == 2 and levels[2]["requests"] == 2
    for lv in levels.values():
        assert lv["tokens"] == 32 * lv["requests"]  # ignore_eos: every answer is 32 tokens
        assert lv["passes"] >= 32 // 8 * 2  # 4 blocks of 8, 2 passes each, at least
        assert lv["wall_s"] > 0 and lv["ms_per_pass"] > 0
    assert (out / "profile-b1.txt").exists() and (out / "profile-b2.txt").exists()
