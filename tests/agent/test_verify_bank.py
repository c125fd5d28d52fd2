"""The record of training questions the model answers as trained (agent.verify_bank): the
shipped one belongs to the shipped weights and bank, a record is used only for the weights and
bank it was made with, and its entries are what the engine really answers."""

from __future__ import annotations

import asyncio
import json
import shutil

from diffvoice.agent.data import normalize
from diffvoice.agent.paraphrase import ParaphraseSnap, _entries_for
from diffvoice.agent.train.verify_bank import verify
from diffvoice.agent.verify_bank import VERIFIED_FILE, load_verified, targets
from diffvoice.engine.assets import default_model_dir

MODEL = default_model_dir()


def _entries(model=MODEL):
    return _entries_for((model / "facts.yaml").read_text(encoding="utf-8"))


def test_the_shipped_record_matches_the_shipped_weights_and_bank():
    entries = _entries()
    verified = load_verified(MODEL, entries)
    assert verified is not None, f"{VERIFIED_FILE} is stale: python -m " \
        "diffvoice.agent.train.verify_bank"
    record = json.loads((MODEL / VERIFIED_FILE).read_text())
    assert len(verified) == record["n_answered"] == record["n"] - len(record["missed"])
    assert verified <= set(targets(entries)) and len(verified) > 0.9 * len(targets(entries))
    snap = ParaphraseSnap.for_model(MODEL, save=False)
    assert snap.verified == verified


def test_a_record_counts_only_for_its_own_weights_and_a_whole_bank(tmp_path):
    model = tmp_path / "m"
    shutil.copytree(MODEL, model)
    entries = _entries(model)
    assert load_verified(model, entries) is not None
    blob = bytearray((model / "model.safetensors").read_bytes())
    blob[-1] ^= 1  # other weights
    (model / "model.safetensors").write_bytes(bytes(blob))
    assert load_verified(model, entries) is None
    shutil.copy(MODEL / "model.safetensors", model / "model.safetensors")
    assert load_verified(model, entries[:-1]) is None  # another bank
    (model / VERIFIED_FILE).write_text("{not json")
    assert load_verified(model, entries) is None
    (model / VERIFIED_FILE).unlink()
    assert load_verified(model, entries) is None


def test_verify_records_what_the_engine_really_answers(tmp_path):
    """Every 60th training question decoded as served; the questions recorded as missed are
    exactly those whose reply differs from the trained answer or whose first block is unsure
    (checked by decoding a few again one at a time)."""
    from diffvoice.agent.facts import load_facts
    from diffvoice.agent.train.evaluate import DEFAULT_SETTINGS, parse_setting, path_params
    from diffvoice.engine import Engine

    out = tmp_path / "rec.json"
    rec = verify(MODEL, out=out, every=60, concurrency=8)
    entries = _entries()
    assert rec["n"] == len(targets(entries)[::60]) and json.loads(out.read_text()) == rec
    assert load_verified(MODEL, entries) is not None  # the shipped record is untouched
    missed = {m["question"] for m in rec["missed"]}
    params = path_params("tools", parse_setting(DEFAULT_SETTINGS[0], 64),
                         load_facts(MODEL / "facts.yaml"))
    engine = Engine.from_pretrained(MODEL)

    async def ask(q):
        text, last = "", None
        async for d in engine.generate([{"role": "user", "content": q}], params):
            text, last = text + d.text, d
        return text.strip(), last.first_block_confidence

    try:
        for i in targets(entries)[::60][:12]:
            reply, conf = asyncio.run(ask(entries[i].text))
            right = normalize(reply) == normalize(entries[i].reply) and conf >= 0.5
            assert right == (entries[i].text not in missed), (entries[i].text, reply, conf)
    finally:
        engine.close()


def test_verification_cut_by_its_deadline_verifies_nothing_it_did_not_decode(tmp_path):
    """`diffvoice train`'s budget ends verification: what was not decoded by then is recorded
    as missed (not verified), so snapping never prefers a question nobody checked."""
    import time

    model = tmp_path / "m"
    shutil.copytree(MODEL, model)
    lines = []
    rec = verify(model, every=1, concurrency=8, deadline=time.monotonic(), progress=lines.append)
    entries = _entries(model)
    assert rec["n"] == len(targets(entries)) == rec["n_not_decoded"] == len(rec["missed"])
    assert rec["n_answered"] == 0 and all(m["reply"] is None for m in rec["missed"])
    assert load_verified(model, entries) == frozenset()  # a whole record: none verified
