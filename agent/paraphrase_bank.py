"""The paraphrase bank: every question the training templates render for a fact sheet.

    entries = bank_entries(DataGenerator(facts))  # [BankEntry(text, reply, swap, intent), ...]
    head_label(entry)                             # the intent head's label of a bank question
    Snap(text, similarity, nearest, swapped)      # what the model is asked in a message's place
Also the bank's identity (`_digest`), the reader of its stored embeddings (`_stored`,
BANK_FILE), the per-process caches of entries and embeddings, and a fact sheet's service words.
Used by paraphrase snapping (agent/paraphrase.py, agent/paraphrase_intent.py). Encodes nothing;
knows nothing about how a message is snapped.
"""

from __future__ import annotations

import dataclasses
import functools
import random
import threading
from pathlib import Path

import torch
import yaml

from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.facts import parse_facts
from diffvoice.agent.sentence_encoder import ENCODER
from diffvoice.agent.verify_bank import bank_digest

BANK_FILE = "paraphrase_bank.safetensors"
_OPENERS = 40000  # dialogue turns sampled for the bank's never-swapped booking openers


@dataclasses.dataclass(frozen=True)
class BankEntry:
    text: str        # a question as the training templates render it
    reply: str       # the model's trained answer to it (for reports; not used to answer)
    swap: bool       # a fact / small-talk question (a snap target); False for booking openers
    intent: str = ""  # the question's intent ("hours_day", ...; "book", "cancel", ...)


def bank_entries(gen: DataGenerator, seed: int = 0) -> list[BankEntry]:
    """Every training-template question of `gen`'s fact sheet, per slot value, with its answer;
    then single-turn booking openers from the training dialogues (never swap targets)."""
    f = gen.facts
    seen: dict[str, BankEntry] = {}

    def add(text: str, reply: str, swap: bool, intent: str) -> None:
        key = normalize(text)
        if key and key not in seen:
            seen[key] = BankEntry(text, reply, swap, intent)

    business = (f.name.lower(), f.name.split()[0].lower())
    for intent, slot, _ in gen.units:
        reply = gen.answer(intent, slot)[0]
        for template in gen.questions[intent][0]:  # training templates only
            for text in template.expand():
                texts = [text]
                if "<day>" in text:
                    texts = [t.replace("<day>", d) for t in texts for d in (slot, slot + "s")]
                if "<service>" in text:
                    service = next(s for s in f.services if s.name == slot)
                    texts = [t.replace("<service>", a) for t in texts for a in service.aliases]
                if "<business>" in text:
                    texts = [t.replace("<business>", b) for t in texts for b in business]
                for t in texts:
                    add(t, reply, True, intent)
    rng = random.Random(seed)
    for _ in range(_OPENERS):
        turn = gen.dialogues.sample(rng, "train")
        if len(turn.messages) == 1 and turn.messages[0]["role"] == "user":
            add(turn.messages[0]["content"], turn.reply, False, turn.intent)
    return list(seen.values())


_digest = bank_digest  # the bank's identity (agent.verify_bank)


_BANKS: dict[str, torch.Tensor] = {}  # digest -> embeddings, per process
_BANKS_LOCK = threading.Lock()


@functools.lru_cache(maxsize=8)
def _entries_for(facts_yaml: str) -> tuple[BankEntry, ...]:
    return tuple(bank_entries(DataGenerator(parse_facts(yaml.safe_load(facts_yaml)))))


def _stored(path: Path, digest: str) -> torch.Tensor | None:
    """A bank file's embeddings when it was built for `digest` with this encoder, else None."""
    if not path.is_file():
        return None
    from safetensors import safe_open

    try:
        with safe_open(str(path), "pt") as f:
            meta = f.metadata() or {}
            if meta.get("digest") == digest and meta.get("encoder") == ENCODER:
                return f.get_tensor("embeddings").float()
    except Exception:  # a damaged file is rebuilt, not fatal
        return None
    return None


def head_label(entry: BankEntry) -> str:
    """The intent head's label of a bank question: its intent, except that a price or duration
    question naming no service ("what's the price", trained to get "which service?") is a price
    or duration question like the others; the stated service tells them apart."""
    if entry.intent == "follow:clarify":
        from diffvoice.agent.dialogue_flows import OtherFlows

        return "price" if entry.reply == OtherFlows.clarify_service("price") else "duration"
    return entry.intent


def _service_words(facts) -> dict[str, frozenset[str]]:
    from diffvoice.agent.facts import service_aliases

    return {s: frozenset(w for a in aliases for w in normalize(a).split())
            for s, aliases in service_aliases(facts).items()}


@dataclasses.dataclass(frozen=True)
class Snap:
    text: str               # what the model is asked (the bank question, or the message itself)
    similarity: float       # cosine similarity to the nearest bank question
    nearest: str            # the nearest bank question
    swapped: bool
