"""Which training questions the model answers exactly as trained: intent snapping's first choice.

    python -m diffvoice.agent.train.verify_bank --model DIR  # DIR/paraphrase_verified.json
    verified = load_verified(model_dir, entries)                    # bank indices, or None

Intent snapping (agent.paraphrase) asks the model a training question of the caller's
intent in place of the caller's words. A 3.6M-parameter model does not answer every one of its
training questions as trained ("are you open sunday" -> the Saturday hours; "where is bluebird"
-> an unsure first block), so the snap prefers, among the questions of the right intent, service
and day, those this model answers exactly right (its reply is the trained answer) and confidently
(the first block's confidence at or above the clarify threshold), decoded as the server decodes
(the model's default setting, the receptionist's tools). The model still writes every answer;
this only chooses which of its own training questions it is asked. The file records the bank's
digest and a hash of the weights: a retrained model or an edited fact sheet needs a new file
(`diffvoice train` writes one, with agent.train.verify_bank; without it every question of the
intent is a candidate).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

VERIFIED_FILE = "paraphrase_verified.json"


def weights_digest(model_dir: str | Path) -> str:
    h = hashlib.sha256()
    with open(Path(model_dir) / "model.safetensors", "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def bank_digest(entries) -> str:
    """The paraphrase bank's identity: its questions and which of them snap."""
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.text}\t{e.swap}\n".encode())
    return h.hexdigest()[:16]


def targets(entries) -> list[int]:
    """Bank indices intent snapping can ask: fact / small-talk questions and the price or
    duration questions naming no service (answered with "which service?")."""
    return [i for i, e in enumerate(entries) if e.swap or e.intent == "follow:clarify"]


def load_verified(model_dir: str | Path, entries) -> frozenset[int] | None:
    """Indices of `entries` the model's record says it answers as trained; None without a
    record for this bank and these weights."""
    path = Path(model_dir) / VERIFIED_FILE
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        if record.get("digest") != bank_digest(list(entries)) or \
                record.get("weights") != weights_digest(model_dir):
            return None
        if record.get("every") != 1:
            return None  # a partial record (tests) says nothing of the questions it skipped
        missed = {m["question"] for m in record["missed"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return frozenset(i for i in targets(entries) if entries[i].text not in missed)
