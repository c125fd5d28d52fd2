"""What the intent head of paraphrase snapping learns from more data: one table, head only.

    python -m diffvoice.agent.train.head_study --out head_study.json
        [--encoder DIR] [--extra labelled.jsonl] [--independent]

Fits the intent head (agent/sentence_encoder.py `IntentHead`, as `ParaphraseSnap` fits
it: the bank's questions plus the training phrasings of "book that") and variants of it with more
data, and reports for each how many single-turn fact / small-talk questions it gives the right
intent at the serving threshold (probability >= 0.5, the questions intent snapping acts on):
  * `bank`: as served;
  * `bank+variants`: plus one `variants.vary` rendering of every bank question (the rewrite
    rules training uses: spellings, synonyms, wrappers, ASR confusions, disfluencies);
  * `bank+asr`: plus the transcripts of the training ASR cache (asr_train.jsonl) of half of its
    voices, measured on the other half's (`asr_dev`), so what recognisers wrote is learnt from
    voices other than those it is measured on;
  * `bank+extra`: plus `--extra`, a JSONL of {"text", "intent"} rows written by someone else
    (e.g. a public intent corpus mapped to the receptionist's intents);
  * with `--encoder DIR`: `bank@DIR`, the bank alone embedded by another sentence-transformers
    model directory.
Measured sets: the template held-out questions (`template`) and `asr_dev`; `--independent` adds
the independent set (text, spoken by Kokoro and espeak voices, heard by Whisper tiny.en) — those
are evaluation sets: report them, do not choose by them. Only for the default fact sheet.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch

from diffvoice.agent.data import DataGenerator, Example
from diffvoice.agent.dialogue_phrases import FOLLOW_BOOK
from diffvoice.agent.facts import load_facts
from diffvoice.agent.paraphrase import INTENT_THRESHOLD, ParaphraseSnap, head_label
from diffvoice.agent.sentence_encoder import IntentHead
from diffvoice.agent.train.asr_augment import TRAIN_CACHE, load_cache
from diffvoice.agent.variants import vary

_SINGLE = ("fact", "small_talk")


def score(head: IntentHead, embeddings: torch.Tensor, intents: list[str],
          threshold: float = INTENT_THRESHOLD) -> dict:
    """right: intent right at >= threshold (what snapping acts on), over all questions; also
    the top intent's accuracy whatever its probability, and the share at >= threshold."""
    right = covered = top = 0
    for emb, want in zip(embeddings, intents, strict=True):
        label, p = head.top(emb)
        top += label == want
        if p >= threshold:
            covered += 1
            right += label == want
    n = len(intents)
    return {"n": n, "right": right / n if n else None, "top1": top / n if n else None,
            "covered": covered / n if n else None}


def _voice_split(rows: list[dict], seed: int) -> tuple[set, set]:
    voices = sorted({r["voice"] for r in rows})
    random.Random(seed).shuffle(voices)
    half = len(voices) // 2
    return set(voices[:half]), set(voices[half:])


def run(model: str | Path | None = None, encoder: str | None = None,
        extra: str | None = None, independent: bool = False, seed: int = 0) -> dict:
    from diffvoice.engine.assets import default_model_dir

    model = Path(model) if model else default_model_dir()
    gen = DataGenerator(load_facts(model / "facts.yaml"), use_chitchat=False)
    snap = ParaphraseSnap.for_model(model, save=False)
    snap._sig_ready.wait()
    enc = snap.encoder
    book = list(FOLLOW_BOOK["train"])
    base_x = torch.cat([snap.embeddings, enc.encode(book)])
    base_y = [head_label(e) for e in snap.entries] + ["book"] * len(book)

    rng = random.Random(seed + 1)
    var_text, var_y = [], []
    for e, y in zip(snap.entries, base_y, strict=False):
        v = vary(e.text.lower(), rng)
        if v != e.text.lower():
            var_text.append(v)
            var_y.append(y)
    labels = set(base_y)
    cache = [r for r in load_cache(TRAIN_CACHE) if r["heard"].strip() and r["intent"] in labels]
    fit_voices, dev_voices = _voice_split(cache, seed)
    asr_fit = [r for r in cache if r["voice"] in fit_voices]

    heads: dict[str, tuple[IntentHead, object]] = {}
    t0 = time.perf_counter()
    heads["bank"] = (IntentHead.fit(base_x, base_y), enc)
    heads["bank+variants"] = (IntentHead.fit(torch.cat([base_x, enc.encode(var_text)]),
                                             base_y + var_y), enc)
    heads["bank+asr"] = (IntentHead.fit(
        torch.cat([base_x, enc.encode([r["heard"] for r in asr_fit])]),
        base_y + [r["intent"] for r in asr_fit]), enc)
    if extra:
        rows = [json.loads(line) for line in Path(extra).read_text(encoding="utf-8").splitlines()
                if line.strip()]
        unknown = {r["intent"] for r in rows} - labels
        if unknown:
            raise ValueError(f"--extra names intents the receptionist lacks: {sorted(unknown)}")
        heads["bank+extra"] = (IntentHead.fit(
            torch.cat([base_x, enc.encode([r["text"] for r in rows])]),
            base_y + [r["intent"] for r in rows]), enc)
    if encoder:
        other = _StEncoder(encoder)
        x = other.encode([e.text for e in snap.entries] + book)
        heads[f"bank@{Path(encoder).name}"] = (IntentHead.fit(x, base_y), other)
    fit_s = time.perf_counter() - t0

    sets: dict[str, list[tuple[str, str]]] = {
        "template": [(e.question, e.intent) for e in gen.eval_set(seed=1234, per_template=1)
                     if e.kind in _SINGLE and not e.history],
        "asr_dev": [(r["heard"], r["intent"]) for r in cache
                    if r["voice"] in dev_voices and r["intent"] != "book"],
    }
    if independent:
        from diffvoice.agent.train.independent import independent_examples, spoken_examples

        def single(exs: list[Example]) -> list[tuple[str, str]]:
            return [(e.question, e.intent) for e in exs if e.kind in _SINGLE and not e.history]

        sets["independent"] = single(independent_examples(gen))
        for tts in ("kokoro", "espeak"):
            sets[f"spoken-{tts}:whisper-tiny.en"] = single(
                spoken_examples(gen, asr="whisper-tiny.en", tts=tts))
    table: dict[str, dict[str, dict]] = {}
    for name, (head, head_enc) in heads.items():
        table[name] = {}
        for set_name, items in sets.items():
            emb = head_enc.encode([q for q, _ in items])
            table[name][set_name] = score(head, emb, [i for _, i in items])
    return {"model": str(model), "seed": seed, "threshold": INTENT_THRESHOLD,
            "fit_voices": sorted(fit_voices), "dev_voices": sorted(dev_voices),
            "n_fit": {"bank": len(base_y), "variants": len(var_y), "asr": len(asr_fit)},
            "fit_s": round(fit_s, 1), "heads": table}


class _StEncoder:
    """Another sentence-transformers model directory, unit-length float32 rows, offline."""

    def __init__(self, path: str) -> None:
        from sentence_transformers import SentenceTransformer

        self.model = SentenceTransformer(path, device="cpu", local_files_only=True)

    def encode(self, texts: list[str]) -> torch.Tensor:
        return torch.as_tensor(self.model.encode(texts, batch_size=64,
                                                 normalize_embeddings=True)).float()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m diffvoice.agent.train.head_study",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None, help="checkpoint directory (default: shipped)")
    ap.add_argument("--encoder", default=None,
                    help="another sentence-transformers model directory to compare")
    ap.add_argument("--extra", default=None,
                    help='JSONL of {"text": ..., "intent": ...} rows to fit the head on too')
    ap.add_argument("--independent", action="store_true",
                    help="also report the independent evaluation sets (do not choose by them)")
    ap.add_argument("--seed", type=int, default=0, help="voice split and variant seed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="write the report here (JSON)")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    report = run(args.model, args.encoder, args.extra, args.independent, args.seed)
    for head, sets in report["heads"].items():
        cells = "  ".join(f"{s} {v['right']:.1%}" for s, v in sets.items())
        print(f"{head:28s} {cells}")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
