"""examples/ run as a user runs them: each script in its own process, text in, text out.

pipecat_diffusion_llm.py runs the engine in-process, pipecat_receptionist.py with the agent's
rules and the appointment book's tools; pipecat_openai_llm.py (pipecat's
OpenAILLMService with the knobs in extra_body), openai_client.py and openai_tools_booking.py (a
booking with the served receptionist tools) talk to one real
`diffvoice serve --api-only` on 127.0.0.1, whose /metrics shows that their requests arrived.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from diffvoice.latency_bench.server_proc import LocalServer

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
SCALE = float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(600 * SCALE))]


def _run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's packages, like an install
    out = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                         text=True, env=env, cwd=REPO, timeout=300 * SCALE)
    assert out.returncode == 0, f"{script}: {out.returncode}\n{out.stderr[-3000:]}"
    return out.stdout


def _successes(server) -> float:
    with urllib.request.urlopen(server.base_url + "/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples
               if s.name == "vllm:request_success_total")


@pytest.fixture(scope="module")
def server():
    with LocalServer(["--api-only", "--device", "cpu"], start_timeout_s=300 * SCALE) as local:
        yield local


def test_pipecat_app_with_the_in_process_diffusion_service():
    answer = _run("pipecat_diffusion_llm.py", "When are you open on Saturday?").strip()
    assert answer and any(c.isalpha() for c in answer), answer


def test_a_pipecat_app_with_the_agent_books_an_appointment(tmp_path):
    """examples/pipecat_receptionist.py: DiffusionLLMService with agent=, the book's tools as
    pipecat function calls; the caller's turns are text (its STT's place); the booking is in the
    SQLite book afterwards."""
    book = tmp_path / "book.sqlite3"
    lines = _run("pipecat_receptionist.py", "can I book a cleaning on friday at 10 am",
                 "--name", "sam jones", "--book", str(book)).strip().splitlines()
    assert lines[0] == "caller: can I book a cleaning on friday at 10 am"
    assert lines[-1] == "booked: ('cleanings', 'friday', '10:00', 'sam jones')", lines
    assert any(line.startswith("agent: You're booked") for line in lines), lines


def test_the_same_app_through_pipecats_openai_service(server):
    before = _successes(server)
    answer = _run("pipecat_openai_llm.py", "--base-url", server.base_url + "/v1",
                  "When are you open on Saturday?").strip().splitlines()[-1]
    assert any(c.isalpha() for c in answer), answer
    assert _successes(server) == before + 1   # one streamed chat request, through our server


def test_openai_tools_booking_script(server):
    """docs/tool-calling.md's API booking, as examples/openai_tools_booking.py runs it."""
    before = _successes(server)
    question, call = _run("openai_tools_booking.py", "--base-url",
                          server.base_url + "/v1").strip().splitlines()[-2:]
    assert "name" in question.lower(), question
    name, arguments = call.split(" ", 1)
    assert (name, json.loads(arguments)) == ("book_appointment", {
        "service": "cleanings", "day": "friday", "time": "10:00", "name": "sam jones"})
    assert _successes(server) == before + 2


def test_openai_client_script(server):
    before = _successes(server)
    lines = _run("openai_client.py", "--base-url", server.base_url + "/v1",
                 "How much does a cleaning cost?").strip().splitlines()
    assert any(c.isalpha() for c in lines[0]) and lines[-1].startswith("completion:")
    assert _successes(server) == before + 2   # chat + completions
