"""`diffvoice generate` and `diffvoice chat` through the console entry point."""

import io

import pytest

from diffvoice.engine import DEFAULT_MODEL_DIR
from diffvoice.engine.cli import main
from diffvoice.engine.testing import make_random_checkpoint


def test_generate_prints_answer_and_latency(tmp_path, capsys):
    ckpt = make_random_checkpoint(tmp_path / "m", family="sdar")
    assert main(["generate", "--model", str(ckpt), "--prompt", "hello", "--max-new-tokens",
                 "8", "--policy", "low_confidence"]) == 0
    out = capsys.readouterr().out
    assert "first block" in out and "8 tokens" in out and "tok/s" in out


@pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "config.json").is_file(),
                    reason="the shipped model is missing")
def test_chat_without_model_flag_uses_the_shipped_receptionist(monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("what time do you open on saturday?\n\n"))
    assert main(["chat"]) == 0
    out = capsys.readouterr().out
    assert "receptionist-tiny" in out  # the banner names the model it loaded
    assert "9 am to 1 pm" in out  # facts.yaml: saturday 9 am to 1 pm
    assert "first block" in out
