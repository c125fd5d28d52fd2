"""Issue 12, problem 8: docs/protocol.md and the code agree on every error code and close code."""

import re
from pathlib import Path

from diffvoice.voice.transport import protocol

DOC = Path(__file__).resolve().parents[3] / "docs" / "protocol.md"


def test_every_error_code_is_documented_with_its_close_code():
    text = DOC.read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (\d{4}) \|", text, flags=re.M))
    assert {k: int(v) for k, v in rows.items()} == protocol.ERROR_CLOSE_CODES


def test_documented_limits_match_the_code():
    text = DOC.read_text()
    assert f"{protocol.MAX_AUDIO_FRAME_BYTES:,}".replace(",", " ") in text
    assert f"{protocol.MAX_TEXT_FRAME_CHARS:,}".replace(",", " ") in text
    assert "1009" in text and "1 MiB" in text  # the WebSocket layer's own limit
