"""The intent head's side of paraphrase snapping (agent/paraphrase.py): intent snapping,
sound-alike service words and later turns.

    class ParaphraseSnap(IntentSnapping)   # agent.paraphrase
    snap.sounds_like(text)                 # the services a misheard word of `text` sounds like
    snap.follow_up(messages)               # a later turn as its training follow-up, or None
IntentSnapping holds the methods that use the intent head (agent.sentence_encoder.IntentHead,
fitted once per bank and process): a first message heard as a training question of the head's
intent stating the same services and days (`_intent_snap`), and a later turn heard as the
training follow-up of its intent ("let's do it" -> "let's do that") or as the question of the
previous answer's intent for another service or day (`follow_up`). It has no state of its own:
ParaphraseSnap.__init__ sets every attribute it reads (the bank, its embeddings, the encoder, the
slot signature, and the indexes built in its thread). Knows nothing about building, storing or
loading the bank.
"""

from __future__ import annotations

import torch

from diffvoice.agent.data import normalize
from diffvoice.agent.paraphrase_bank import _BANKS_LOCK, BankEntry, Snap, _digest, head_label
from diffvoice.agent.sentence_encoder import IntentHead

_PER_SERVICE = ("price", "duration")  # intents whose answer needs a service
_HEADS: dict[str, IntentHead] = {}  # bank digest -> fitted head, per process


def _sound_keys(own_words: dict[str, frozenset]) -> list[tuple[str, str, str]]:
    import jellyfish

    return [(service, word, jellyfish.metaphone(word))
            for service, words in own_words.items() for word in sorted(words) if len(word) >= 5]


class IntentSnapping:
    """The intent head's methods of ParaphraseSnap (agent.paraphrase), which sets the
    attributes they read."""

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
