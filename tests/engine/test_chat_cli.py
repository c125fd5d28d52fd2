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


def test_help_opens_with_what_diffvoice_is(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "self-hosted real-time voice agent" in out and "registry" not in out


@pytest.mark.parametrize("broken", ["missing", "no_tokenizer", "refused_field", "bad_policy"])
def test_generate_names_what_is_wrong_in_one_line(tmp_path, capsys, broken):
    import json

    ckpt = make_random_checkpoint(tmp_path / "m", family="sdar")
    extra = []
    if broken == "missing":
        ckpt = tmp_path / "nowhere"
    elif broken == "no_tokenizer":
        (ckpt / "tokenizer.json").unlink()
    elif broken == "refused_field":
        config = json.loads((ckpt / "config.json").read_text())
        (ckpt / "config.json").write_text(json.dumps({**config, "hidden_act": "gelu"}))
    else:
        extra = ["--policy", "no-such-policy"]
    assert main(["generate", "--model", str(ckpt), "--prompt", "hi", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("diffvoice generate: ") and "\n" not in err, err
    assert "Traceback" not in err
    expected = {"missing": "no such directory", "no_tokenizer": "tokenizer",
                "refused_field": "hidden_act", "bad_policy": "no-such-policy"}[broken]
    assert expected in err, err
