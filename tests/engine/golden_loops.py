"""Golden data for tests/engine/test_golden.py: load a family's fixture and golden tokens, and
regenerate the goldens from the plain loops in engine.reference_loops (no upstream code needed):

    python tests/engine/golden_loops.py FAMILY   # rewrites golden/FAMILY/golden.json outputs
"""

from __future__ import annotations

import contextlib
import json
import sys
from pathlib import Path

import torch

GOLDEN = Path(__file__).parent / "golden"


def load_golden(family: str):
    from diffvoice.engine.loader import load_checkpoint

    loaded = load_checkpoint(GOLDEN / family / "fixture", dtype="float32", device="cpu")
    return loaded, json.loads((GOLDEN / family / "golden.json").read_text())


@contextlib.contextmanager
def golden_engine(family: str, **config):
    """(golden data, an Engine on the family's fixture: max_running 2, float32 unless `config`
    says otherwise); the engine is closed afterwards."""
    from diffvoice.engine import Engine, EngineConfig

    _, golden = load_golden(family)
    engine = Engine.from_pretrained(GOLDEN / family / "fixture",
                                    EngineConfig(**{"max_running": 2, "dtype": "float32",
                                                    **config}))
    try:
        yield golden, engine
    finally:
        engine.close()


def main(family: str) -> None:
    """Rewrite the golden outputs of `family` from the plain loops (no upstream code needed)."""
    from diffvoice.engine.reference_loops import run_case

    loaded, golden = load_golden(family)
    eos = set(loaded.config.eos_token_ids)
    with torch.inference_mode():
        for case in golden["cases"]:
            out = run_case(family, loaded.model, loaded.config, case)
            case["output"] = out
            cut = out[: case["max_new_tokens"]] if family == "sdar" else out
            case["answer"] = next((cut[:j] for j, t in enumerate(cut) if t in eos), cut)
    (GOLDEN / family / "golden.json").write_text(json.dumps(golden, separators=(",", ":")))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    main(sys.argv[1])
