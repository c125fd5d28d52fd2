"""Caller phrasings, caller names and spoken times for the dialogue generators (data only).

Every phrase table maps a split ("train" / "heldout") to a disjoint list, so held-out booking
accuracy is measured on phrasings (and caller names) training never used. `Turn` is one generated
example: the chat messages and the ONE reply the model must give. `say_time` renders "10:30" as a
caller or their ASR says it; `spoken_times` joins offered times as the assistant says them.
Knows nothing about fact sheets, tokenizers or models.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from diffvoice.agent.tool_schemas import spoken_time

_WORDS = ("twelve one two three four five six seven eight nine ten eleven twelve").split()
FIRST = ("ann mark lisa tom sara james maria david emma john olivia peter grace kevin nina paul "
         "laura sam rachel daniel chloe mike anna steve julia ben kate ryan amy luke helen "
         "aisha ahmed ali amir ana andre arjun bea bill carlos carmen chen chris dan dev diana "
         "elena eli eric fatima frank gary gina hannah harry ian jack jade jamal jane jason "
         "jen joe jorge josh karen kim lena leo liam lily lucy mai marco mei mia nate neil "
         "noah omar pablo priya raj ravi rita rob sean sofia sunil tara theo tina tony "
         "victor wei will yusuf zara zoe").split()
LAST = ("lee smith jones brown garcia miller davis wilson taylor clark lewis walker hall young "
        "king wright lopez hill green adams baker nelson carter mitchell perez roberts turner "
        "phillips campbell parker ahmed bailey bell brooks chen cole cook cooper cruz diaz "
        "edwards evans foster gray hughes jackson james kelly khan kim lin long martin meyer "
        "morgan murphy nguyen olsen patel price reed reyes rivera ross russell sanchez scott "
        "shah singh stone sullivan ward watson white wood wu yang").split()
# syllables of made-up caller names (training only): callers' names are often ones the model
# never saw, so it must learn to copy a name rather than recall one
_ONSETS = ("b d f g h j k l m n p r s t v w z br ch dr gr kr pr sh st tr").split()
_VOWELS = ("a e i o u ai ay ee ia io oa ou").split()
_CODAS = ("", "", "", "n", "r", "l", "s", "th", "k", "m", "x", "nd")


def made_up_name(rng: random.Random) -> str:
    """A pronounceable made-up word of 1-3 syllables ("dramik", "sheelo")."""
    syllables = rng.choice((1, 2, 2, 3))
    return "".join(rng.choice(_ONSETS) + rng.choice(_VOWELS) for _ in range(syllables)) \
        + rng.choice(_CODAS)


# held-out callers (never in training)
FIRST_HELD = "oscar ivy felix rosa hugo".split()
LAST_HELD = "quinn ortiz hayes moreno fischer".split()

BOOK_VERBS = ({
    "train": ["i'd like to book", "can i book", "i want to book", "i need to book", "please book",
              "could i schedule", "i want to schedule", "i'd like to schedule", "can i get",
              "i need", "i'd like to make an appointment for", "can you book me in for",
              "i'd like to come in for", "can i make an appointment for", "set me up with",
              "i'm looking to book", "is it possible to book", "i'd like an appointment for",
              "can you put me down for", "i wanna book", "could you book"],
    "heldout": ["i would love to get", "could you squeeze me in for", "i'm hoping to book",
                "let me book", "sign me up for"]})
NO_SERVICE = ("an appointment", "a visit", "a slot", "an appointment please", "me in")
DAY_PARTS = {"train": ["on {d}", "for {d}", "this {d}", "next {d}", "{d}", "on {d} please"],
             "heldout": ["sometime {d}", "for this coming {d}"]}
TIME_PARTS = {"train": ["at {t}", "around {t}", "for {t}", "{t}", "at about {t}"],
              "heldout": ["say {t}", "at roughly {t}"]}
NAME_PARTS = {"train": ["for {n}", "my name is {n}", "under {n}", "it's for {n}",
                        "the name is {n}", "name's {n}", "this is {n}"],
              "heldout": ["put it under {n}", "and i'm {n}"]}
AVAIL_OPENERS = {
    "train": ["do you have anything {d} for {s}", "what times do you have {d} for {s}",
              "is there availability {d} for {s}", "any openings {d} for {s}",
              "when can i come in {d} for {s}", "what's free {d} for {s}",
              "do you have any slots {d} for {s}", "is {t} {d} free for {s}",
              "do you have {t} {d} for {s}", "is {t} available {d} for {s}",
              "can i get {s} {d} at {t} is that free", "are you free {d} at {t} for {s}"],
    "heldout": ["what openings are there {d} for {s}", "got any time {d} for {s}",
                "would {t} {d} work for {s}"]}
ANSWER_SERVICE = {"train": ["{s}", "{s} please", "it's for {s}", "just {s}", "um {s}",
                            "i need {s}", "i'd like {s}", "{s} {d}"],
                  "heldout": ["for {s}", "i was thinking {s}"]}
ANSWER_DAY = {"train": ["{d}", "on {d}", "{d} please", "how about {d}", "{d} works",
                        "{d} at {t}", "um {d} i guess", "this {d}"],
              "heldout": ["let's do {d}", "maybe {d}"]}
ANSWER_TIME = {"train": ["{t}", "at {t}", "{t} please", "around {t}", "{t} if possible",
                         "{t} would be great", "{t} for {n}", "um {t}"],
               "heldout": ["let's say {t}", "{t} works for me"]}
ASK_TIMES = {"train": ["what times do you have", "what's free", "what do you have",
                       "what's available", "when are you free"],
             "heldout": ["which times are open"]}
ANSWER_NAME = {"train": ["{n}", "it's {n}", "my name is {n}", "{n} please", "the name is {n}",
                         "name's {n}", "um {n}", "{n} thanks"],
               "heldout": ["you can put {n}", "that would be {n}"]}
CANCEL_OPENERS = {
    "train": ["i need to cancel my appointment", "cancel my appointment", "i want to cancel",
              "i'd like to cancel my appointment", "i have to cancel my {d} appointment",
              "i can't make it {d} please cancel", "please cancel my appointment {d}",
              "can you cancel my booking", "i need to cancel {d}"],
    "heldout": ["i won't make it {d} so cancel it", "scrap my appointment"]}
FOLLOW_PRICE = {"train": ["how much is that", "and the price", "what does that cost",
                          "how much is it", "and how much", "what's the price", "cost"],
                "heldout": ["and what would that cost me", "price"]}
FOLLOW_DURATION = {"train": ["how long does that take", "how long is it", "and how long",
                             "how long will that be", "how long does it take", "how much time"],
                   "heldout": ["and how long is that", "duration"]}
FOLLOW_OTHER = {"train": ["and {x}", "what about {x}", "how about {x}", "and for {x}",
                          "and {x} then"],
                "heldout": ["ok and {x}", "then {x}"]}
# v4 (2026-12-03): more ways to say "book it" (the v3 model answered the previous question
# again for any phrasing outside its five); the held-out phrasing stays unseen
FOLLOW_BOOK = {"train": ["can i book that", "i'd like to book that", "book me in for that",
                         "can i come in then", "can i get that", "i'll take it", "let's do that",
                         "book it", "go ahead and book it please", "put me down for that",
                         "i want to book one", "ok can you schedule me", "reserve that for me",
                         "great i'd like an appointment", "count me in", "get me in for that",
                         "yes please make the appointment", "perfect book me",
                         "can you set that up for me", "i'd like to come in for that"],
               "heldout": ["sign me up"]}


@dataclass(frozen=True)
class Turn:
    messages: tuple[dict, ...]
    reply: str
    intent: str      # "book", "availability", "cancel", "follow:price", ...
    slot: str | None
    call: tuple[str, str] | None = None  # (name, arguments JSON) when the reply is a call


def spoken_times(times: list[str]) -> str:
    words = [spoken_time(t) for t in times]
    if len(words) == 1:
        return words[0]
    if len(words) == 2:
        return f"{words[0]} or {words[1]}"
    return ", ".join(words[:-1]) + ", or " + words[-1]


def say_time(hhmm: str, rng: random.Random) -> str:
    """How a caller (or their ASR) says 10:30: '10:30', 'ten thirty', 'half past ten', ..."""
    hour, minute = int(hhmm[:2]), int(hhmm[3:])
    h12 = hour % 12 or 12
    half = "am" if hour < 12 else "pm"
    word = _WORDS[h12]
    if minute == 0:
        options = [f"{h12}", f"{h12} {half}", f"{h12} {half[0]}.m.", f"{h12}{half}",
                   f"{h12} o'clock", word, f"{word} {half}", f"{word} o'clock",
                   f"{h12} in the {'morning' if hour < 12 else 'afternoon'}"]
        if hour == 12:
            options += ["noon", "midday", "12 noon"]
    else:
        options = [f"{h12}:{minute:02d}", f"{h12}:{minute:02d} {half}", f"{h12} {minute}",
                   f"{word} {_min_word(minute)}", f"half past {h12}", f"half past {word}",
                   f"{h12}:{minute:02d} {half[0]}.m."]
        if minute != 30:
            options = options[:4]
    return rng.choice(options)


def _min_word(minute: int) -> str:
    return {30: "thirty", 15: "fifteen", 45: "forty five"}.get(minute, str(minute))
