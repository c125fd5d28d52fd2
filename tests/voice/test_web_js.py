"""Runs the page's pure-JS unit tests (tests/voice/js/*.test.mjs, for web/pcm.js) under node.

The resampler, PCM16 conversion, frame chunker and playback clock are checked against simple
references on seeded random inputs there; this wrapper makes them part of `pytest`.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from browser_harness import REPO_ROOT, timeout_scale

JS_TESTS = sorted((Path(__file__).parent / "js").glob("*.test.mjs"))


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_web_pure_js_units():
    assert JS_TESTS, "no JS test files found"
    result = subprocess.run(
        ["node", "--test", *map(str, JS_TESTS)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120 * timeout_scale(),
    )
    # node's TAP output names every failing subtest and its assertion
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert "# fail 0" in result.stdout
