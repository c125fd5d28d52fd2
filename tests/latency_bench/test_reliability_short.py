"""The reliability harness at its short scale (what `diffvoice bench reliability --short`
runs): every part against one real `diffvoice serve` on loopback; every correctness check must
pass. The goals that are figures, not outcomes, are left to the full run's report
(docs/reliability.md): RSS per session (2 sessions measure pool warm-up, not growth), the
/ws ping round-trip bound and the legit callers' server_ms p99 abused / quiet (timing targets
judged on one or two turns here; they depend on the machine's load)."""

import asyncio
import os
from pathlib import Path

import pytest

from diffvoice.latency_bench.corpus import RECEPTIONIST_PROMPTS, default_corpus
from diffvoice.latency_bench.reliability.run import PARTS, SCALES, run_parts

SCALE = float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
pytestmark = [pytest.mark.slow, pytest.mark.timeout(int(900 * SCALE))]
# timing-bound checks that a few short runs on a shared CPU cannot judge; the full run
# (docs/reliability.md) reports them (the storm's one-pass cancel held 99 of 100 there)
NOT_MEANINGFUL_SHORT = {"memory": ("RSS growth <= ",), "realtime": ("RSS growth <= ",),
                        "isolation": ("/ws ping round-trip", "legit server_ms p99"),
                        "storm": ("interrupted engine request gone within one pass",)}

# A soak turn that fails only because the answer's audio paused longer than the client's
# --bot-quiet-s (1 s) mid-answer, so the caller spoke over its resumption, is a timing
# judgement: the full run counts it (docs/reliability.md); errors of any other kind fail here.
PACING = "resumed after a pause longer than --bot-quiet-s"
# The booking check (issue 39 finding 10) speaks a name through pocketsphinx, which hears it
# right about one turn in two on a loaded CPU; when no attempt was heard right and nobody's
# booking was touched, it proves nothing either way: the full run judges it (more attempts).
INCONCLUSIVE = "INCONCLUSIVE (speech recognition)"


def _only_pacing(part: dict) -> bool:
    examples = part.get("error_examples") or []
    count = part["errors"] if isinstance(part.get("errors"), int) else len(part.get("errors") or [])
    return 0 < count <= len(examples) and all(PACING in e for e in examples)


def test_every_part_passes_at_short_scale(tmp_path):
    from diffvoice.engine import DEFAULT_MODEL_DIR

    if not (DEFAULT_MODEL_DIR / "config.json").exists():
        pytest.skip("the embedded model is not in the tree")
    prompts = default_corpus(tmp_path / "corpus", voices=("en-us",), speeds=(175,),
                             texts=RECEPTIONIST_PROMPTS[:4])
    results = asyncio.run(run_parts(PARTS, SCALES["short"], prompts, str(DEFAULT_MODEL_DIR)))
    failed = []
    for name, part in results["parts"].items():
        assert part["checks"], name
        for c in part["checks"]:
            if not c["ok"] and not c["name"].startswith(NOT_MEANINGFUL_SHORT.get(name, ("\0",))):
                if name == "soak" and c["name"] == "0 failed turns" and _only_pacing(part):
                    continue
                if name == "attacks" and c["detail"].startswith(INCONCLUSIVE):
                    continue
                failed.append(f"{name}: {c['name']}: {c['detail']}")
    assert not failed, "\n".join(failed)
    assert results["server_log"]["tracebacks"] == 0, results["server_log"]["examples"]
    assert Path(results["parts"]["fuzz"]["checks"][0]["detail"]).name  # figures were recorded
