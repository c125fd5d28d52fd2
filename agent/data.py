"""Turn a fact sheet into (question, answer) pairs for training and held-out evaluation.

`DataGenerator(facts, use_chitchat=...)`:
  - `sample_train(rng) -> Example`: one training pair drawn from training templates only, with
    ASR-like noise (fillers, casing, punctuation, disfluent repeats).
  - `eval_set(seed, per_template) -> list[Example]`: every held-out template for every slot value
    (held-out fillers included), deterministic for a seed.
  - `answer(intent, slot) -> (text, facts)`: the one spoken answer per (intent, slot). There is
    deliberately ONE answer per question: a diffusion decoder commits several tokens per pass as if
    they were independent, so two equally likely phrasings get mixed ("We're open We are...").
Held-out templates are checked at construction never to render a string a training template can
render (ValueError otherwise). Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import dataclasses
import random
import re
import zlib
from dataclasses import dataclass

from diffvoice.agent.dialogues import Dialogues, Turn
from diffvoice.agent.facts import DAYS, FactSheet
from diffvoice.agent.grammar import Template
from diffvoice.agent.templates import (
    FACT_INTENTS,
    PREFIXES,
    QUESTIONS,
    SMALL_TALK_INTENTS,
    SUFFIXES,
)
from diffvoice.agent.variants import disfluent, in_context, stray_words, vary

# the training mixture (probabilities per drawn example): the recipe
P_DIALOGUE = 0.35   # booking / availability / cancel / follow-up examples (dialogues.py)
P_VARY = 0.45       # single questions rewritten by variants.vary
P_ASR = 0.2         # single questions replaced by a cached ASR transcript (asr_cache.py)
P_HISTORY = 0.2     # single questions preceded by an unrelated previous exchange
P_CONTEXT = 0.1     # single questions inside an unrelated chit-chat line (variants.in_context)
P_DISFLUENT = 0.15  # dialogue turns with a restart or hesitation (variants.disfluent)
P_STRAY = 0.1       # single questions with one or two unrelated chit-chat words dropped in

# words a caller slips in anywhere (training-time augmentation only)
_INSERTS = ("just", "like", "actually", "really", "um", "uh", "so", "maybe", "you know", "i mean",
            "quickly", "again", "now", "please")
_DROPPABLE = frozenset(
    "the a an your you do does is are i me can could to for of on this there my will would it "
    "be at any have get".split())
_CHITCHAT_BLOCKLIST = re.compile(
    r"\b(hours?|open|close|price|cost|charge|appointment|dentist|dental|tooth|teeth|clinic|"
    r"address|located|book|booking|insurance|pay|park|parking|email|phone|number|call|name|who|"
    r"robot|bot|human|thanks?|thank|bye|goodbye|hi|hello|hey|cancel|walk|emergency|repeat|"
    r"sorry|pardon|services?|schedule|how are you|directions?|where)\b")


@dataclass(frozen=True)
class Example:
    intent: str          # e.g. "price", "faq:insurance", "greeting", "book", "follow:price"
    slot: str | None     # day or service name, None otherwise
    template: str        # the core template text (or "chitchat:<id>"); identity for splits
    question: str        # what the caller said, as ASR would transcribe it
    answer: str          # the one reply (spoken text, or a tool call's wire text)
    facts: tuple[str, ...]  # values the reply must contain to count as correct
    kind: str            # "fact", "small_talk", "flow" (booking/tools) or "follow" (follow-up)
    history: tuple[dict, ...] = ()  # chat messages before `question` (the previous exchange)
    after: tuple[dict, ...] = ()    # the current turn's tool call + tool result, if any
    call: tuple[str, str] | None = None  # (tool name, arguments JSON) when `answer` is a call

    def messages(self) -> list[dict]:
        """The chat messages the model sees for this example (OpenAI format)."""
        return [*self.history, {"role": "user", "content": self.question}, *self.after]


def normalize(text: str) -> str:
    """Lowercase, drop punctuation except inside numbers/words, collapse spaces (for scoring)."""
    text = text.lower().replace("’", "'")
    text = re.sub(r"[^a-z0-9' ]+", " ", text)
    return " ".join(text.split())


def _heard_its_days(record: dict) -> bool:
    """A cached booking opener is used only if every day its reply names was heard: training on
    'Can you work a cleaning gun' -> 'What time on Friday ...' would teach inventing a day."""
    if record["intent"] != "book":
        return True
    heard = set(normalize(record["heard"]).replace("'s", "").split()) | {
        w.rstrip("s") for w in normalize(record["heard"]).split()}
    said = normalize(record.get("reply", "") + " " + " ".join(record.get("call") or ()))
    return len(heard) >= 3 and all(day in heard for day in DAYS if day in said.split())


def _join_days(days: list[str]) -> str:
    names = [d.capitalize() for d in days]
    return names[0] if len(names) == 1 else f"{names[0]} to {names[-1]}"


class DataGenerator:
    def __init__(self, facts: FactSheet, use_chitchat: bool = False,
                 asr_cache: list[dict] | None = None) -> None:
        self.facts = facts
        self.dialogues = Dialogues(facts, lambda intent, slot=None: self.answer(intent, slot))
        # cached recognised texts [{intent, slot, heard}] usable with this fact sheet
        self._asr_raw = asr_cache or []
        self.questions: dict[str, tuple[list[Template], list[Template]]] = {
            intent: ([Template(t) for t in train], [Template(t) for t in heldout])
            for intent, (train, heldout) in QUESTIONS.items()}
        for item in facts.faq:
            self.questions[f"faq:{item.id}"] = (
                [Template(q) for q in item.questions[:-1]], [Template(item.questions[-1])])
        self._check_disjoint()
        # units: (intent, slot, weight). Sampling is uniform over units, weighted.
        self.units: list[tuple[str, str | None, float]] = []
        for intent in self.questions:
            if intent == "hours_day":
                self.units += [(intent, day, 1.0) for day in DAYS]
            elif intent in ("price", "duration"):
                self.units += [(intent, s.name, 1.0) for s in facts.services]
            elif intent == "out_of_scope":
                self.units.append((intent, None, 1.2))
            elif intent in SMALL_TALK_INTENTS:
                self.units.append((intent, None, 0.6))
            else:
                self.units.append((intent, None, 1.5 if intent == "hours_week" else 1.0))
        self._weights = [w for _, _, w in self.units]
        self._heldout_filled = self._filled_heldout()
        known = {(i, s) for i, s, _ in self.units} | {("book", None)}
        self.asr_cache = [r for r in self._asr_raw if (r["intent"], r.get("slot")) in known
                          and r["heard"].strip()
                          and normalize(r["heard"]) not in self._heldout_filled
                          and _heard_its_days(r)]
        self.chitchat_train: list[str] = []
        self.chitchat_eval: list[str] = []
        self._chitchat_words: list[str] = []
        if use_chitchat:
            self._load_chitchat()

    # ------------------------------------------------------------------ answers
    def answer(self, intent: str, slot: str | None = None) -> tuple[str, tuple[str, ...]]:
        f = self.facts
        if intent == "hours_day":
            hours = dict(f.hours)[slot]
            day = slot.capitalize()
            if hours == "closed":
                return f"Sorry, we're closed on {day}s.", ("closed",)
            return f"On {day}s we're open from {hours}.", (hours,)
        if intent == "hours_week":
            groups: list[tuple[list[str], str]] = []
            for day, hours in f.hours:
                if groups and groups[-1][1] == hours:
                    groups[-1][0].append(day)
                else:
                    groups.append(([day], hours))
            open_parts = [f"{_join_days(d)} {h}" for d, h in groups if h != "closed"]
            closed = [d for d, h in f.hours if h == "closed"]
            text = "We're open " + (
                ", ".join(open_parts[:-1]) + ", and " + open_parts[-1]
                if len(open_parts) > 1 else open_parts[0]) + "."
            if closed:
                days = " and ".join(d.capitalize() + "s" for d in closed)
                text += f" We're closed on {days}."
            return text, tuple(dict.fromkeys(h for _, h in f.hours if h != "closed"))
        if intent in ("price", "duration"):
            service = next(s for s in f.services if s.name == slot)
            spoken = service.spoken[0].upper() + service.spoken[1:]
            if intent == "price":
                return f"{spoken} is {service.price}.", (service.price,)
            return f"{spoken} takes about {service.duration}.", (service.duration,)
        if intent == "services_list":
            names = [s.name for s in f.services]
            listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + ", and " + names[-1]
            return f"We offer {listed}.", tuple(names)
        if intent.startswith("faq:"):
            item = next(i for i in f.faq if i.id == intent[4:])
            return item.answer, (item.fact,)
        fixed = {
            "address": (f"We're at {f.address}.", (f.address,)),
            "directions": (f.directions, (f.directions_fact,)),
            "phone": (f"Our number is {f.phone}.", (f.phone,)),
            "email": (f"You can email us at {f.email}.", (f.email,)),
            "booking": (f.booking_answer, (f.booking_fact,)),
            "greeting": (f"Hi, thanks for calling {f.name}. How can I help you today?",
                         ("how can i help",)),
            "how_are_you": ("I'm doing well, thanks for asking. How can I help you today?",
                            ("doing well",)),
            "thanks": ("You're welcome. Is there anything else I can help with?",
                       ("you're welcome",)),
            "goodbye": (f"Thanks for calling {f.name}. Have a great day!", ("have a great day",)),
            "who_are_you": (f"I'm {f.assistant_name}, the virtual receptionist at {f.name}.",
                            (f.assistant_name,)),
            "are_you_human": (
                "I'm a virtual assistant, but I can help with our hours, prices, and bookings.",
                ("virtual assistant",)),
            "repeat": ("Sorry about that. I can help with our hours, location, prices, and "
                       "appointments.", ("sorry about that",)),
            "human_agent": (f"Our front desk answers at {f.phone} during opening hours.",
                            ("front desk",)),
            "out_of_scope": (f"Sorry, I can only help with questions about {f.name}, like our "
                             "hours, prices, and appointments.", ("only help with questions",)),
        }
        if intent not in fixed:
            raise ValueError(f"unknown intent {intent!r}")
        return fixed[intent]

    def all_answers(self) -> list[str]:
        return [self.answer(intent, slot)[0] for intent, slot, _ in self.units]

    # ------------------------------------------------------------------ questions
    def _fill(self, text: str, intent: str, slot: str | None, rng: random.Random) -> str:
        if "<day>" in text:
            plural = "on <day>" in text and rng.random() < 0.3
            text = text.replace("<day>", slot + ("s" if plural else ""))
        if "<service>" in text:
            service = next(s for s in self.facts.services if s.name == slot)
            text = text.replace("<service>", rng.choice(service.aliases))
        if "<business>" in text:
            name = self.facts.name.lower()
            text = text.replace("<business>", rng.choice([name, name, name.split()[0]]))
        return text

    def _asr_noise(self, core: str, intent: str, rng: random.Random, heldout: bool) -> str:
        words = core.split()
        if len(words) > 2 and rng.random() < 0.05:  # disfluent repeat: "what what time"
            i = rng.randrange(len(words) - 1)
            words.insert(i, words[i])
        core = " ".join(words)
        if intent in FACT_INTENTS or intent.startswith("faq:") or intent == "out_of_scope":
            prefixes = PREFIXES[0] + (PREFIXES[1] if heldout else [])
            suffixes = SUFFIXES[0] + (SUFFIXES[1] if heldout else [])
            prefix, suffix = rng.choice(prefixes), rng.choice(suffixes)
            sep = rng.choice([", ", " ", ". "])
            core = (prefix + sep + core if prefix else core) + (
                rng.choice([", ", " "]) + suffix if suffix else "")
        end = rng.choice(["?", "?", ".", "", ""])
        if intent in SMALL_TALK_INTENTS and end == "?" and intent not in (
                "how_are_you", "who_are_you", "are_you_human", "repeat", "out_of_scope"):
            end = rng.choice([".", "!", ""])
        text = core + end
        casing = rng.random()
        if casing < 0.45:
            text = text[0].upper() + text[1:]  # Whisper-style sentence case
        elif casing < 0.5:
            text = text.upper()
        text = re.sub(r"\bi\b", "I", text) if casing < 0.45 else text
        return text

    @staticmethod
    def _augment(core: str, rng: random.Random) -> str:
        """Training only: drop, insert or swap words so no single phrasing is memorized whole.
        Only function words are dropped, so the request keeps its meaning."""
        words = core.split()
        if len(words) >= 4 and rng.random() < 0.3:
            kept = [w for w in words if w not in _DROPPABLE or rng.random() > 0.25]
            words = kept if len(kept) >= 2 else words
        if rng.random() < 0.2:
            words.insert(rng.randrange(len(words) + 1), rng.choice(_INSERTS))
        if len(words) >= 3 and rng.random() < 0.08:
            i = rng.randrange(len(words) - 1)
            words[i], words[i + 1] = words[i + 1], words[i]
        return " ".join(words)

    def _example(self, intent: str, slot: str | None, template: Template, rng: random.Random,
                 heldout: bool) -> Example:
        core = template.sample(rng)
        filled = self._fill(core, intent, slot, rng)
        if not heldout:
            augmented = self._fill(self._augment(core, rng), intent, slot, rng)
            # an augmentation that happens to spell a held-out question is not used
            filled = augmented if normalize(augmented) not in self._heldout_filled else filled
        question = self._asr_noise(filled, intent, rng, heldout)
        answer, facts = self.answer(intent, slot)
        kind = "small_talk" if intent in SMALL_TALK_INTENTS else "fact"
        return Example(intent, slot, template.text, question, answer, facts, kind)

    def from_turn(self, turn: Turn, template: str) -> Example:
        """A dialogues.Turn as an Example (the last user message is the question)."""
        msgs = list(turn.messages)
        last = max(i for i, m in enumerate(msgs) if m["role"] == "user")
        kind = "follow" if turn.intent.startswith("follow:") else "flow"
        facts = (turn.reply,) if turn.call is None else ()
        return Example(turn.intent, turn.slot, template, msgs[last]["content"], turn.reply, facts,
                       kind, tuple(msgs[:last]), tuple(msgs[last + 1:]), turn.call)

    def _single(self, rng: random.Random) -> Example:
        intent, slot, _ = rng.choices(self.units, weights=self._weights)[0]
        if intent == "out_of_scope" and self.chitchat_train and rng.random() < 0.5:
            line = rng.choice(self.chitchat_train)
            answer, facts = self.answer(intent)
            return Example(intent, None, "chitchat:train", line, answer, facts, "small_talk")
        ex = self._example(intent, slot, rng.choice(self.questions[intent][0]), rng, False)
        if rng.random() < P_VARY:
            varied = vary(ex.question.lower().rstrip("?.!"), rng)
            if normalize(varied) not in self._heldout_filled:
                ex = dataclasses.replace(ex, question=varied + rng.choice(["?", "", "."]))
        return self._distract(ex, rng)

    def _distract(self, ex: Example, rng: random.Random) -> Example:
        """Training only: unrelated talk around the question or stray words in it (from the
        training chit-chat lines), so unfamiliar words do not decide the answer."""
        if not self.chitchat_train or ex.intent == "out_of_scope":
            return ex
        roll = rng.random()
        if roll < P_CONTEXT:
            text = in_context(ex.question.rstrip("?.!"), rng.choice(self.chitchat_train), rng)
        elif roll < P_CONTEXT + P_STRAY:
            text = stray_words(ex.question, self._chitchat_words, rng)
        else:
            return ex
        return dataclasses.replace(ex, question=text)

    def sample_train(self, rng: random.Random) -> Example:
        roll = rng.random()
        if roll < P_DIALOGUE:
            ex = self.from_turn(self.dialogues.sample(rng, "train"), "dialogue:train")
            if rng.random() < P_DISFLUENT:  # "i'd like to uh i'd like to book ..."
                ex = dataclasses.replace(ex, question=disfluent(ex.question, rng))
            return ex
        if roll < P_DIALOGUE + P_ASR * (1 - P_DIALOGUE) and self.asr_cache:
            rec = rng.choice(self.asr_cache)
            if rec["intent"] == "book":  # a cached booking opener: its reply is a flow reply
                ex = Example("book", None, "asr:train", rec["heard"], rec["reply"], (rec["reply"],),
                             "flow", call=tuple(rec["call"]) if rec.get("call") else None)
            else:
                answer, facts = self.answer(rec["intent"], rec.get("slot"))
                kind = "small_talk" if rec["intent"] in SMALL_TALK_INTENTS else "fact"
                ex = Example(rec["intent"], rec.get("slot"), "asr:train", rec["heard"], answer,
                             facts, kind)
        else:
            ex = self._single(rng)
        if rng.random() < P_HISTORY:  # an unrelated previous exchange the model must ignore
            prev = self._single(rng)
            ex = dataclasses.replace(ex, history=(
                {"role": "user", "content": prev.question},
                {"role": "assistant", "content": prev.answer}))
        return ex

    def dialogue_eval_set(self, seed: int = 4321, n: int = 240) -> list[Example]:
        """Held-out booking / tool / follow-up turns: held-out phrasings and caller names."""
        rng = random.Random(seed)
        out = []
        kinds = [k for k in dict.fromkeys(self.dialogues.kinds)]
        for i in range(n):
            turn = self.dialogues.sample(rng, "heldout", kinds[i % len(kinds)])
            out.append(self.from_turn(turn, "dialogue:heldout"))
        return out

    def is_well_formed(self, text: str) -> bool:
        """Exactly a reply the fact sheet yields (any intent, slot, flow shape) or a valid call."""
        text = text.strip()
        if not hasattr(self, "_answer_set"):
            self._answer_set = set(self.all_answers())
        return text in self._answer_set or self.dialogues.is_flow_reply(text)

    def eval_set(self, seed: int = 1234, per_template: int = 1) -> list[Example]:
        rng = random.Random(seed)
        out = []
        for intent, slot, _ in self.units:
            for template in self.questions[intent][1]:
                for _ in range(per_template):
                    out.append(self._example(intent, slot, template, rng, True))
        for line in self.chitchat_eval[: 4 * per_template]:
            answer, facts = self.answer("out_of_scope")
            out.append(Example("out_of_scope", None, "chitchat:eval", line, answer, facts,
                               "small_talk"))
        return out

    # ------------------------------------------------------------------ splits
    def core_strings(self, heldout: bool) -> set[str]:
        """Every normalized rendering of the train (or held-out) core templates, slots unfilled."""
        out = set()
        for train, held in self.questions.values():
            for template in held if heldout else train:
                out.update(normalize(s.replace("<", "SLOT").replace(">", "")) for s in
                           template.expand())
        return out

    def _filled_heldout(self) -> set[str]:
        """Every normalized held-out core question with every slot value filled in."""
        days = list(DAYS) + [d + "s" for d in DAYS]
        services = [a for s in self.facts.services for a in s.aliases]
        name = self.facts.name.lower()
        out: set[str] = set()
        for _, held in self.questions.values():
            for template in held:
                for text in template.expand():
                    variants = [text]
                    for slot, values in (("<day>", days), ("<service>", services),
                                         ("<business>", [name, name.split()[0]])):
                        if slot in text:
                            variants = [v.replace(slot, x) for v in variants for x in values]
                    out.update(normalize(v) for v in variants)
        return out

    def _check_disjoint(self) -> None:
        for intent, (train, held) in self.questions.items():
            if not train or not held:
                raise ValueError(f"intent {intent!r} needs both training and held-out templates")
        both = self.core_strings(False) & self.core_strings(True)
        if both:
            raise ValueError(f"held-out templates also render as training ones: {sorted(both)[:5]}")

    def _load_chitchat(self) -> None:
        """Short first lines of real chit-chat conversations become out-of-scope inputs."""
        try:
            import chitchat_dataset
        except ImportError as exc:
            raise ValueError("use_chitchat needs the `chitchat-dataset` package "
                             "(pip install chitchat-dataset)") from exc
        lines = []
        for key, convo in chitchat_dataset.Dataset().items():
            for group in convo["messages"][:3]:
                for message in group:
                    text = " ".join(message["text"].split())
                    n_words = len(text.split())
                    if 3 <= n_words <= 14 and text.isascii() and not _CHITCHAT_BLOCKLIST.search(
                            text.lower()):
                        lines.append((key, text))
        for key, text in sorted(set(lines)):
            bucket = zlib.crc32(key.encode()) % 10
            (self.chitchat_eval if bucket == 0 else self.chitchat_train).append(text)
        random.Random(0).shuffle(self.chitchat_eval)
        words = {w for line in self.chitchat_train for w in normalize(line).split()}
        self._chitchat_words = sorted(w for w in words if len(w) > 2 and w.isalpha() and not
                                      _CHITCHAT_BLOCKLIST.search(w))
