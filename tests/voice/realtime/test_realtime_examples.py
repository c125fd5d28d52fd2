"""examples/realtime_sdk.py and examples/realtime_pipecat.py run as a user runs them (their own
process, `python examples/...`) against the live server's /v1/realtime (random-weight model:
gibberish words, but each exchange must complete: exit 0, an answer, its audio written)."""

from __future__ import annotations

import os
import subprocess
import sys
import wave
from pathlib import Path

import pytest
from voice_fixtures import scaled

REPO = Path(__file__).resolve().parents[3]


def _run(script: str, *args: str) -> str:
    env = dict(os.environ)
    out = subprocess.run([sys.executable, str(REPO / "examples" / script), *args],
                         capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=scaled(180))
    assert out.returncode == 0, f"{script}: {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout


def _secs(path: Path) -> float:
    with wave.open(str(path)) as f:
        return f.getnframes() / f.getframerate()


@pytest.fixture
def base(live_server) -> tuple[str, str]:
    host = live_server.ws_url.split("://", 1)[1].split("/", 1)[0]
    return f"ws://{host}", live_server.state.model_name


@pytest.mark.parametrize("tool", [False, True], ids=["text", "function-call"])
def test_sdk_example(base, tmp_path, tool):
    url, model = base
    out = tmp_path / "answer.wav"
    stdout = _run("realtime_sdk.py", "--url", f"{url}/v1", "--model", model, "--text",
                  "When are you open?", "--out", str(out), *(["--tool"] if tool else []))
    assert "agent: " in stdout and _secs(out) > 0.3, stdout
    if tool:
        assert "model called get_weather(" in stdout, stdout


def test_sdk_example_speaks_a_wav(base, tmp_path, speech):
    url, model = base
    question = tmp_path / "question.wav"
    with wave.open(str(question), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(speech("what are your opening hours"))
    out = tmp_path / "answer.wav"
    stdout = _run("realtime_sdk.py", "--url", f"{url}/v1", "--model", model, "--wav",
                  str(question), "--out", str(out))
    assert "caller: " in stdout and _secs(out) > 0.3, stdout


def test_pipecat_example(base, tmp_path):
    url, model = base
    out = tmp_path / "answer.wav"
    _run("realtime_pipecat.py", "--url", f"{url}/v1/realtime", "--model", model, "--text",
         "When are you open?", "--out", str(out))
    assert _secs(out) > 0.3
