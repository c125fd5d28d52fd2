"""Rewrite rules that vary a caller's question without changing what it asks (training only).

`vary(text, rng, keywords=...) -> str` applies, each with its own probability:
  - spelling/contraction variants both ways ("what's" / "whats" / "what is", "i'd" / "id" /
    "i would", "you're" / "your") — ASR and typing produce all of them;
  - synonym rules on whole words and phrases ("clinic" / "office" / "practice", "tell me" /
    "let me know", "appointment" / "appt" / "visit");
  - polite wrappers and run-on context ("i was wondering", "could you tell me", "i'm calling
    because ... so", "... if that's ok") and questions inside a longer sentence;
  - keyword-only rendering (content words only: "price cleaning", "saturday hours");
  - ASR confusions (homophones and near-homophones: "for" / "four", "hours" / "ours",
    "filling" / "feeling") and dropped short words;
  - disfluencies: restarts ("can i uh can i book"), hesitations ("um", "uh", "er") and a repeated
    word, as spontaneous speech and its transcripts have them;
  - `in_context(text, filler, rng)`: the question inside unrelated talk (a chit-chat line before
    or after it), and `stray_words`: a few unrelated words dropped in, so words the model never
    saw do not decide the answer.
Rules are data (tuples below), written to be broad rather than tied to one template. Knows nothing
about intents, answers or models.
"""

from __future__ import annotations

import random
import re

# groups of interchangeable spellings (each group: every member may become any other)
SPELLINGS = (
    ("what's", "whats", "what is"), ("where's", "wheres", "where is"), ("how's", "hows"),
    ("i'd", "id", "i would"), ("i'm", "im", "i am"), ("don't", "dont", "do not"),
    ("can't", "cant", "cannot"), ("it's", "its", "it is"), ("that's", "thats", "that is"),
    ("you're", "youre", "you are"), ("i've", "ive", "i have"), ("what're", "what are"),
    ("there's", "theres", "there is"), ("when's", "when is"), ("isn't", "is not"),
    ("doesn't", "does not"), ("wanna", "want to"), ("gonna", "going to"), ("ok", "okay"),
    ("walk ins", "walk-ins", "walkins"), ("checkup", "check up", "check-up"),
    ("x ray", "x-ray", "xray"),
)
# synonyms safe in this domain (phrase -> alternatives); applied to whole words only
SYNONYMS = (
    ("clinic", ("office", "practice", "place", "dentist")),
    ("office", ("clinic", "practice", "place")),
    ("tell me", ("let me know", "give me", "say")),
    ("could you", ("can you", "would you")), ("can you", ("could you", "would you")),
    ("can i", ("could i", "may i")), ("could i", ("can i",)),
    ("i want to", ("i'd like to", "i need to", "i wanna")),
    ("i'd like to", ("i want to", "i would like to", "i'd love to")),
    ("appointment", ("appt", "visit", "slot")),
    ("how much is", ("what's the price of", "how much's")),
    ("do you", ("do you guys", "do y'all")), ("you guys", ("you", "you folks")),
    ("a lot", ("very much", "so much")), ("please", ("pls", "if you can")),
    ("cost", ("come to",)),
    ("open", ("opened",)), ("hours", ("times", "opening times")),
    ("kids", ("children's", "kid", "child")), ("my son", ("my daughter", "my kid", "my boy")),
    ("tomorrow", ("tmrw",)), ("hi", ("hey", "hello", "hiya")), ("hello", ("hi", "hallo")),
)
# near-homophones ASR swaps for each other
ASR_CONFUSIONS = (
    ("for", "four"), ("to", "two"), ("hours", "ours"), ("your", "you're"), ("filling", "feeling"),
    ("fillings", "feelings"), ("crown", "crowd"), ("cleaning", "clean in"), ("whitening",
    "whiting"), ("there", "their"), ("book", "look"), ("price", "prize"), ("new", "knew"),
    ("week", "weak"), ("close", "clothes"), ("walk", "work"), ("cancel", "counsel"),
    ("tuesday", "choose day"), ("thursday", "thirsty"), ("friday", "fry day"), ("any", "and he"),
    ("wheelchair", "wheel chair"), ("insurance", "assurance"), ("address", "a dress"),
)
WRAPPERS = (
    "i was wondering {q}", "could you tell me {q}", "can you tell me {q}", "do you know {q}",
    "i wanted to ask {q}", "i'd like to know {q}", "i just wanted to know {q}", "quick one {q}",
    "sorry to bother you but {q}", "i have a question {q}", "yeah so {q}", "i need to know {q}",
    "{q} if that's ok", "{q} if you don't mind", "{q} by any chance", "{q} do you know",
    "hi yes {q}", "um so basically {q}", "okay so um {q}", "hello i had a question {q}",
    "can i ask {q}", "would you happen to know {q}", "real quick {q}", "just wondering {q}",
)
RUN_ON = (
    "i'm calling because {q}", "my son needs to come in so {q}", "i just moved to the area and {q}",
    "i work during the day so {q}", "my wife asked me to call and {q}", "i saw your sign and {q}",
    "a friend recommended you and {q}", "i'm not sure if you can help but {q}",
    "{q} because i need to plan my week", "{q} i'm asking for my mom", "{q} i'm trying to plan",
    "{q} and i'm in a bit of a hurry", "so i was looking online and {q}",
    "i tried calling earlier and {q}", "{q} thanks a lot i appreciate it",
)
_FUNCTION_WORDS = frozenset(
    "the a an your you do does is are i me can could to for of on this there my will would it be "
    "at "
    "any have get what what's whats when where how which please tell know like want need i'd i'm "
    "so um uh just and or if that's ok okay hi hello hey yes yeah well guys".split())


def _sub_phrase(text: str, old: str, new: str) -> str:
    return re.sub(rf"(?<![\w']){re.escape(old)}(?![\w'])", new, text, count=1)


def _has(text: str, phrase: str) -> bool:
    return re.search(rf"(?<![\w']){re.escape(phrase)}(?![\w'])", text) is not None


def spell(text: str, rng: random.Random, p: float = 0.7) -> str:
    for group in SPELLINGS:
        for member in group:
            if _has(text, member) and rng.random() < p:
                text = _sub_phrase(text, member, rng.choice([g for g in group if g != member]))
                break
    return text


def synonyms(text: str, rng: random.Random, p: float = 0.35) -> str:
    for old, alternatives in SYNONYMS:
        if _has(text, old) and rng.random() < p:
            text = _sub_phrase(text, old, rng.choice(alternatives))
    return text


def asr_confuse(text: str, rng: random.Random, p: float = 0.15) -> str:
    for a, b in ASR_CONFUSIONS:
        if _has(text, a) and rng.random() < p:
            text = _sub_phrase(text, a, b)
    words = text.split()
    if len(words) > 4 and rng.random() < p:  # a short word lost
        short = [i for i, w in enumerate(words) if len(w) <= 3]
        if short:
            del words[rng.choice(short)]
    return " ".join(words)


def keywords_only(text: str, rng: random.Random, keep: tuple[str, ...] = ()) -> str:
    words = [w for w in text.split() if w not in _FUNCTION_WORDS or w in keep]
    if len(words) < 1:
        return text
    if len(words) > 1 and rng.random() < 0.3:
        words = words[::-1]
    return " ".join(words)


def wrap(text: str, rng: random.Random, run_on: bool = False) -> str:
    return rng.choice(RUN_ON if run_on else WRAPPERS).format(q=text)


HESITATIONS = ("um", "uh", "er", "erm", "hmm", "uh so", "like", "you know", "sorry")


def disfluent(text: str, rng: random.Random) -> str:
    """A restart of the first words, a hesitation, or a repeated word."""
    words = text.split()
    if len(words) < 2:
        return text
    roll = rng.random()
    if roll < 0.45:  # restart: "can i uh can i book a cleaning"
        n = rng.randint(1, min(3, len(words) - 1))
        middle = [rng.choice(HESITATIONS)] if rng.random() < 0.5 else []
        words = words[:n] + middle + words
    elif roll < 0.8:
        words.insert(rng.randrange(len(words) + 1), rng.choice(HESITATIONS))
    else:
        i = rng.randrange(len(words))
        words.insert(i, words[i])
    return " ".join(words)


def in_context(text: str, filler: str, rng: random.Random) -> str:
    """The question inside unrelated talk: '<filler> so <q>', '<q> <filler>'."""
    filler = filler.lower().rstrip("?.!")
    return rng.choice(("{f} {q}", "{f} so {q}", "{f} anyway {q}", "{f} but {q}", "{q} {f}",
                       "{f} and {q}")).format(f=filler, q=text)


def stray_words(text: str, vocabulary: list[str], rng: random.Random) -> str:
    """One or two unrelated words inserted at random places."""
    words = text.split()
    for _ in range(rng.choice((1, 1, 2))):
        words.insert(rng.randrange(len(words) + 1), rng.choice(vocabulary))
    return " ".join(words)


def vary(text: str, rng: random.Random, keywords: bool = True) -> str:
    """One random rewrite of a lower-case question (the probabilities are the recipe)."""
    roll = rng.random()
    if keywords and roll < 0.07 and len(text.split()) >= 3:
        return keywords_only(text, rng)
    text = synonyms(spell(text, rng), rng)
    if roll < 0.27:
        text = wrap(text, rng)
    elif roll < 0.37:
        text = wrap(text, rng, run_on=True)
    if rng.random() < 0.25:
        text = asr_confuse(text, rng)
    if rng.random() < 0.15:
        text = disfluent(text, rng)
    return text
