"""The independent evaluation set (independent_eval.yaml, hand-written apart from the templates)
as Examples, in text and as recognised speech (independent_asr.jsonl).

  load_independent() -> list[dict]            the YAML items, each with an "id"
  independent_examples(gen) -> list[Example]  text questions, scored like the template set
  spoken_examples(gen) -> list[Example]       the same single-turn questions as ASR heard them
  training_overlap(gen, n) -> set[str]        independent questions a training sample produced
Only meaningful for the default fact sheet (Bluebird Dental): evaluate() skips it for others.
Knows nothing about models.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml

from diffvoice.agent.data import DataGenerator, Example, normalize
from diffvoice.agent.templates import SMALL_TALK_INTENTS
from diffvoice.agent.tool_schemas import tool_call_json, tool_call_text

HERE = Path(__file__).parent
INDEPENDENT_PATH = HERE / "independent_eval.yaml"
INDEPENDENT_ASR_PATH = HERE / "independent_asr.jsonl"
BUSINESS = "Bluebird Dental"


def load_independent(path: str | Path = INDEPENDENT_PATH) -> list[dict]:
    items = yaml.safe_load(Path(path).read_text(encoding="utf-8"))["items"]
    for i, item in enumerate(items):
        item["id"] = i
        if sum(k in item for k in ("intent", "expect", "call")) != 1:
            raise ValueError(f"{path}: item {i} needs exactly one of intent/expect/call: {item}")
    return items


def _example(gen: DataGenerator, item: dict, question: str, template: str) -> Example:
    history = []
    for user, assistant in item.get("history") or []:
        history += [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]
    kind = "follow" if history and "intent" in item else None
    if "intent" in item:
        answer, facts = gen.answer(item["intent"], item.get("slot"))
        kind = kind or ("small_talk" if item["intent"] in SMALL_TALK_INTENTS else "fact")
        return Example(item["intent"], item.get("slot"), template, question, answer, facts, kind,
                       tuple(history))
    if "expect" in item:
        return Example("book", None, template, question, item["expect"], (item["expect"],),
                       "flow", tuple(history))
    call = item["call"]
    schemas = gen.dialogues.schemas
    return Example("book", None, template, question,
                   tool_call_text(call["name"], call["arguments"], schemas), (), "flow",
                   tuple(history), (), (call["name"],
                                        tool_call_json(call["name"], call["arguments"], schemas)))


def independent_examples(gen: DataGenerator) -> list[Example]:
    return [_example(gen, item, item["q"], f"independent:{item['id']}")
            for item in load_independent()]


def spoken_examples(gen: DataGenerator, path: str | Path = INDEPENDENT_ASR_PATH,
                    asr: str | None = None, tts: str = "espeak") -> list[Example]:
    """One Example per (question, voice, recogniser) line of the cache, `asr` to pick one,
    `tts` the voices that spoke ("espeak", or "kokoro": the natural voice)."""
    path = Path(path)
    if not path.is_file():
        return []
    items = {item["id"]: item for item in load_independent()}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        if (asr and rec["asr"] != asr) or rec.get("tts", "espeak") != tts:
            continue
        item = items.get(rec["id"])
        if item is None or item["q"] != rec["said"]:
            continue  # the YAML changed since the cache was built
        out.append(_example(gen, item, rec["heard"] or "...",
                            f"spoken:{rec['id']}:{rec['voice']}:{rec['asr']}"))
    return out


def training_overlap(gen: DataGenerator, n: int = 20000, seed: int = 0) -> set[str]:
    """Normalised independent questions equal to a training question: a template rendering
    (core, slots filled), n sampled training questions (variants, dialogues) or cached ASR text."""
    wanted = {normalize(item["q"]) for item in load_independent()}
    seen: set[str] = set()
    for train, _ in gen.questions.values():
        for template in train:
            for text in template.expand():
                for fill in _fills(gen, text):
                    seen.add(normalize(fill))
    rng = random.Random(seed)
    for _ in range(n):
        ex = gen.sample_train(rng)
        seen.add(normalize(ex.question))
    seen |= {normalize(r["heard"]) for r in gen.asr_cache}
    seen |= {normalize(r["said"]) for r in gen.asr_cache}
    return wanted & seen


def _fills(gen: DataGenerator, text: str) -> list[str]:
    from diffvoice.agent.facts import DAYS

    variants = [text]
    for slot, values in (("<day>", list(DAYS) + [d + "s" for d in DAYS]),
                         ("<service>", [a for s in gen.facts.services for a in s.aliases]),
                         ("<business>", [gen.facts.name.lower(),
                                         gen.facts.name.split()[0].lower()])):
        if slot in text:
            variants = [v.replace(slot, x) for v in variants for x in values]
    return variants
