"""Multi-turn training/eval examples: booking, availability and cancelling with tool calls, slot
filling over turns, and follow-up questions that lean on the previous exchange.

`Dialogues(facts, answer)` (answer = DataGenerator.answer) builds `Turn`s: the chat `messages`
(OpenAI format: the previous exchange, the current user message, and the current turn's tool call
and tool result when there is one) and the ONE reply the model must give: a spoken sentence or a
tool call's wire text (engine.train.tool_schemas). Slot-filling questions restate every slot known
so far ("And what name should I put a cleaning on Friday at 10 am under?"), so one previous
exchange carries the whole booking state. `split` ("train" / "heldout") selects disjoint phrasing
lists and disjoint caller names, so held-out booking accuracy is measured on unseen phrasings.
`is_flow_reply(text)` recognises every reply shape these flows produce (for the well-formed rate).
Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from diffvoice.engine.train.facts import DAYS, FactSheet
from diffvoice.engine.train.tool_schemas import (
    parse_tool_call,
    result_text,
    slot_times,
    spoken_time,
    tool_call_json,
    tool_call_text,
    tool_schemas,
)

_WORDS = ("twelve one two three four five six seven eight nine ten eleven twelve").split()
FIRST = ("ann mark lisa tom sara james maria david emma john olivia peter grace kevin nina paul "
         "laura sam rachel daniel chloe mike anna steve julia ben kate ryan amy luke helen").split()
LAST = ("lee smith jones brown garcia miller davis wilson taylor clark lewis walker hall young "
        "king wright lopez hill green adams baker nelson carter mitchell perez roberts turner "
        "phillips campbell parker").split()
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
FOLLOW_BOOK = {"train": ["can i book that", "i'd like to book that", "book me in for that",
                         "can i come in then", "can i get that"],
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


class Dialogues:
    def __init__(self, facts: FactSheet, answer) -> None:
        self.facts = facts
        self.answer = answer
        self.schemas = tool_schemas(facts)
        self.services = {s.name: s for s in facts.services}
        self.hours = dict(facts.hours)
        self.open_days = [d for d in DAYS if self.hours[d] != "closed"]
        self.kinds = ("book", "book", "book", "slot_fill", "slot_fill", "slot_fill", "slot_fill",
                      "availability", "availability", "avail_result", "book_result",
                      "book_result", "cancel", "cancel_fill", "cancel_result", "follow",
                      "follow", "follow", "after_avail", "after_alts")
        self._reply_res = self._reply_patterns()

    # ------------------------------------------------------------------ small helpers
    def _pick(self, table: dict, split: str, rng: random.Random) -> str:
        return rng.choice(table[split])

    def _name(self, split: str, rng: random.Random) -> str:
        first, last = (FIRST, LAST) if split == "train" else (FIRST_HELD, LAST_HELD)
        return rng.choice(first) if rng.random() < 0.25 else f"{rng.choice(first)} " \
            f"{rng.choice(last)}"

    def _alias(self, service: str, rng: random.Random) -> str:
        return rng.choice(self.services[service].aliases)

    def _spoken(self, service: str) -> str:
        return self.services[service].spoken

    def _time(self, day: str, rng: random.Random) -> str:
        return rng.choice(slot_times(self.hours[day]))

    def _call(self, name: str, args: dict) -> tuple[str, tuple[str, str]]:
        return tool_call_text(name, args, self.schemas), (name, tool_call_json(name, args,
                                                                                self.schemas))

    @staticmethod
    def _assistant_call(text: str) -> dict:
        parsed = parse_tool_call(text)
        return {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_0", "type": "function", "function": {
                "name": parsed[0], "arguments": json.dumps(parsed[1], ensure_ascii=False)}}]}

    # ------------------------------------------------------------------ replies
    def ask(self, s: dict) -> str:
        """The next slot-filling question for known slots `s`, restating them."""
        service, day, time = s.get("service"), s.get("day"), s.get("time")
        at = f" at {spoken_time(time)}" if time else ""
        if not service:
            on = f" on {day.capitalize()}" if day else ""
            return f"Sure, what would you like to come in for{on}{at}?"
        spoken = self._spoken(service)
        if not day:
            return f"Sure, what day would you like to come in for {spoken}{at}?"
        if self.hours[day] == "closed":
            return (f"Sorry, we're closed on {day.capitalize()}s. What other day would work for "
                    f"{spoken}?")
        if not time:
            return f"What time on {day.capitalize()} would you like to come in for {spoken}?"
        return f"And what name should I put {spoken} on {day.capitalize()}{at} under?"

    def book_result_reply(self, args: dict, result: dict) -> str:
        when = f"{args['day'].capitalize()} at {spoken_time(args['time'])}"
        if result.get("booked"):
            return f"You're booked for {self._spoken(args['service'])} on {when}."
        alts = result.get("alternatives") or []
        if alts:
            return f"Sorry, {when} is taken. I can do {spoken_times(alts)} instead."
        return f"Sorry, {args['day'].capitalize()} is fully booked. Would another day work?"

    def avail_result_reply(self, args: dict, result: dict) -> str:
        day, spoken, times = args["day"].capitalize(), self._spoken(args["service"]), \
            result["available"]
        if args.get("time"):
            when = f"{day} at {spoken_time(args['time'])}"
            if times and times[0] == args["time"]:
                return f"Yes, {when} is free for {spoken}. What name should I put it under?"
            if times:
                return f"Sorry, {when} is taken. I can do {spoken_times(times)} instead."
        if times:
            return (f"On {day} we have {spoken_times(times)} free for {spoken}. "
                    f"Which would you like?")
        return f"Sorry, we have nothing free on {day} for {spoken}. Would another day work?"

    def error_reply(self) -> str:
        return (f"Sorry, something went wrong on my end. Please call us at {self.facts.phone} "
                f"to book.")

    def cancel_ask(self, s: dict) -> str:
        if not s.get("day"):
            under = f" under {s['name']}" if s.get("name") else ""
            return f"Sure, which day is the appointment{under} you'd like to cancel?"
        return f"And what name is the {s['day'].capitalize()} appointment under?"

    @staticmethod
    def cancel_result_reply(args: dict, result: dict) -> str:
        day = args["day"].capitalize()
        if result.get("cancelled"):
            return f"Your {day} appointment is cancelled."
        return f"Sorry, I couldn't find an appointment on {day} under that name."

    # ------------------------------------------------------------------ caller utterances
    def _opener(self, s: dict, split: str, rng: random.Random) -> str:
        verb = self._pick(BOOK_VERBS, split, rng)
        parts = [self._alias(s["service"], rng) if s.get("service") else rng.choice(NO_SERVICE)]
        if s.get("day"):
            parts.append(self._pick(DAY_PARTS, split, rng).format(d=s["day"]))
        if s.get("time"):
            parts.append(self._pick(TIME_PARTS, split, rng).format(t=say_time(s["time"], rng)))
        if s.get("name"):
            parts.append(self._pick(NAME_PARTS, split, rng).format(n=s["name"]))
        if len(parts) > 2 and rng.random() < 0.2:  # "on friday at 10 i'd like a cleaning"
            return " ".join(parts[1:]) + " " + verb + " " + parts[0]
        return verb + " " + " ".join(parts)

    def _random_slots(self, rng: random.Random, split: str, need=()) -> dict:
        s: dict = {}
        day = rng.choice(self.open_days if rng.random() < 0.93 else list(DAYS))
        for key, p in (("service", 0.6), ("day", 0.55), ("time", 0.35), ("name", 0.2)):
            if key in need or rng.random() < p:
                s[key] = {"service": lambda: rng.choice(list(self.services)),
                          "day": lambda: day,
                          "time": lambda: self._time(day if day in self.open_days else "monday",
                                                     rng),
                          "name": lambda: self._name(split, rng)}[key]()
        if "time" in s and "day" not in s and rng.random() < 0.7:
            del s["time"]
        return s

    def _next(self, s: dict) -> tuple[str, tuple | None]:
        """Reply once slots `s` are known: a question, or the booking call."""
        complete = all(s.get(k) for k in ("service", "day", "time", "name"))
        if complete and self.hours[s["day"]] != "closed":
            text, call = self._call("book_appointment", {k: s[k] for k in
                                                         ("service", "day", "time", "name")})
            return text, call
        return self.ask(s), None

    def _user(self, text: str) -> dict:
        return {"role": "user", "content": text}

    def _assistant(self, text: str) -> dict:
        return {"role": "assistant", "content": text}

    # ------------------------------------------------------------------ one example
    def sample(self, rng: random.Random, split: str = "train", kind: str | None = None) -> Turn:
        kind = kind or rng.choice(self.kinds)
        return getattr(self, "_" + kind)(rng, split)

    def _book(self, rng, split):
        s = self._random_slots(rng, split)
        reply, call = self._next(s)
        return Turn((self._user(self._opener(s, split, rng)),), reply, "book",
                    s.get("service"), call)

    def _slot_fill(self, rng, split):
        """Previous exchange = the last question; the caller answers it (sometimes with more)."""
        s = self._random_slots(rng, split)
        if all(s.get(k) for k in ("service", "day", "time")):
            del s[rng.choice(["service", "day", "time"])]
        if rng.random() < 0.5:
            s.pop("name", None)
        opener = self._opener(s, split, rng)
        question = self.ask(s)
        new = dict(s)
        if not s.get("service"):
            new["service"] = rng.choice(list(self.services))
            day_extra = None if s.get("day") else rng.choice(self.open_days)
            text = self._pick(ANSWER_SERVICE, split, rng)
            if "{d}" in text:
                new["day"] = day_extra
            text = text.format(s=self._alias(new["service"], rng), d=day_extra or "")
        elif not s.get("day") or self.hours[s["day"]] == "closed":
            new["day"] = rng.choice(self.open_days)
            text = self._pick(ANSWER_DAY, split, rng)
            if "{t}" in text:
                new["time"] = self._time(new["day"], rng)
            elif s.get("time") and s["time"] not in slot_times(self.hours[new["day"]]):
                new.pop("time")
            text = text.format(d=new["day"], t=say_time(new.get("time", "10:00"), rng))
        elif not s.get("time"):
            text = self._pick(ANSWER_TIME, split, rng)
            if rng.random() < 0.15:  # "what times do you have?"
                args = {"service": s["service"], "day": s["day"], "time": None}
                reply, call = self._call("check_availability", args)
                return Turn((self._user(opener), self._assistant(question),
                             self._user(self._pick(ASK_TIMES, split, rng))), reply,
                            "availability", s["service"], call)
            new["time"] = self._time(s["day"], rng)
            if "{n}" in text:
                new["name"] = self._name(split, rng)
            text = text.format(t=say_time(new["time"], rng), n=new.get("name", ""))
        else:
            new["name"] = self._name(split, rng)
            text = self._pick(ANSWER_NAME, split, rng).format(n=new["name"])
        reply, call = self._next(new)
        return Turn((self._user(opener), self._assistant(question), self._user(text)), reply,
                    "book" if call else "slot_fill", new.get("service"), call)

    def _availability(self, rng, split):
        service, day = rng.choice(list(self.services)), rng.choice(self.open_days)
        template = self._pick(AVAIL_OPENERS, split, rng)
        time = self._time(day, rng) if "{t}" in template else None
        text = template.format(d=rng.choice(["on ", "this ", "", "for "]) + day,
                               s=self._alias(service, rng), t=say_time(time or "10:00", rng))
        reply, call = self._call("check_availability",
                                 {"service": service, "day": day, "time": time})
        return Turn((self._user(text),), reply, "availability", service, call)

    def _avail_result_parts(self, rng, split):
        turn = self._availability(rng, split)
        args = json.loads(turn.call[1])["arguments"]
        grid = slot_times(self.hours[args["day"]])
        n = rng.choice([0, 1, 2, 3, 3])
        times = sorted(rng.sample(grid, min(n, len(grid))))
        if args["time"] and rng.random() < 0.5:
            times = [args["time"]] + [t for t in times if t != args["time"]][:2]
        elif args["time"]:
            times = [t for t in times if t != args["time"]]
        result = {"available": times}
        msgs = turn.messages + (self._assistant_call(turn.reply),
                                {"role": "tool", "content": result_text(result)})
        return msgs, args, result

    def _avail_result(self, rng, split):
        if rng.random() < 0.05:
            return self._error(rng, split)
        msgs, args, result = self._avail_result_parts(rng, split)
        return Turn(msgs, self.avail_result_reply(args, result), "avail_result", args["service"])

    def _after_avail(self, rng, split):
        """The caller picks a time offered by check_availability (or names themselves)."""
        msgs, args, result = self._avail_result_parts(rng, split)
        if not result["available"]:
            return self._avail_result(rng, split)
        prev = msgs + (self._assistant(self.avail_result_reply(args, result)),)
        s = {"service": args["service"], "day": args["day"]}
        if args["time"] and result["available"][0] == args["time"]:
            s["time"] = args["time"]
            s["name"] = self._name(split, rng)
            text = self._pick(ANSWER_NAME, split, rng).format(n=s["name"])
        else:
            s["time"] = rng.choice(result["available"])
            text = self._pick(ANSWER_TIME, split, rng)
            if "{n}" in text or rng.random() < 0.2:
                s["name"] = self._name(split, rng)
                text = text if "{n}" in text else text + " for {n}"
            text = text.format(t=say_time(s["time"], rng), n=s.get("name", ""))
        reply, call = self._next(s)
        return Turn(prev + (self._user(text),), reply, "book" if call else "slot_fill",
                    s["service"], call)

    def _book_parts(self, rng, split):
        s = self._random_slots(rng, split, need=("service", "day", "time", "name"))
        if self.hours[s["day"]] == "closed":
            s["day"] = rng.choice(self.open_days)
            s["time"] = self._time(s["day"], rng)
        text, _ = self._next(s)
        grid = slot_times(self.hours[s["day"]])
        if rng.random() < 0.5:
            result = {"booked": True}
        else:
            n = rng.choice([0, 1, 2, 2, 3])
            result = {"booked": False, "alternatives": sorted(
                rng.sample([t for t in grid if t != s["time"]], min(n, len(grid) - 1)))}
        msgs = (self._user(self._opener(s, split, rng)), self._assistant_call(text),
                {"role": "tool", "content": result_text(result)})
        return msgs, s, result

    def _book_result(self, rng, split):
        if rng.random() < 0.05:
            return self._error(rng, split)
        msgs, s, result = self._book_parts(rng, split)
        return Turn(msgs, self.book_result_reply(s, result), "book_result", s["service"])

    def _after_alts(self, rng, split):
        msgs, s, result = self._book_parts(rng, split)
        if result["booked"] or not result["alternatives"]:
            return self._book_result(rng, split)
        prev = msgs + (self._assistant(self.book_result_reply(s, result)),)
        new = dict(s, time=rng.choice(result["alternatives"]))
        text = rng.choice(["{t} then", "ok {t}", "{t} works", "{t} please", "let's do {t}",
                           "{t}"]).format(t=say_time(new["time"], rng))
        reply, call = self._next(new)
        return Turn(prev + (self._user(text),), reply, "book", new["service"], call)

    def _error(self, rng, split):
        turn = self._availability(rng, split)
        msgs = turn.messages + (self._assistant_call(turn.reply), {
            "role": "tool", "content": result_text({"error": rng.choice(
                ["calendar unavailable", "timeout", "database locked"])})})
        return Turn(msgs, self.error_reply(), "tool_error", None)

    def _cancel_slots(self, rng, split) -> dict:
        s = {}
        if rng.random() < 0.5:
            s["day"] = rng.choice(self.open_days)
        if rng.random() < 0.35:
            s["name"] = self._name(split, rng)
        return s

    def _cancel_text(self, s, rng, split) -> str:
        template = self._pick(CANCEL_OPENERS, split, rng)
        if "{d}" not in template and s.get("day"):
            template += rng.choice([" on {d}", " for {d}", " {d}"])
        text = template.format(d=s.get("day", ""))
        if "{d}" in template and not s.get("day"):
            text = " ".join(text.split())
        if s.get("name"):
            text += " " + self._pick(NAME_PARTS, split, rng).format(n=s["name"])
        return text

    def _cancel_next(self, s) -> tuple[str, tuple | None]:
        if s.get("day") and s.get("name"):
            return self._call("cancel_appointment", {"name": s["name"], "day": s["day"]})
        return self.cancel_ask(s), None

    def _cancel(self, rng, split):
        s = self._cancel_slots(rng, split)
        reply, call = self._cancel_next(s)
        return Turn((self._user(self._cancel_text(s, rng, split)),), reply, "cancel", None, call)

    def _cancel_fill(self, rng, split):
        s = self._cancel_slots(rng, split)
        if s.get("day") and s.get("name"):
            del s[rng.choice(["day", "name"])]
        opener = self._cancel_text(s, rng, split)
        question = self.cancel_ask(s)
        new = dict(s)
        if not s.get("day"):
            new["day"] = rng.choice(self.open_days)
            text = self._pick(ANSWER_DAY, split, rng).replace(" at {t}", "").format(d=new["day"])
            if rng.random() < 0.3 and not s.get("name"):
                new["name"] = self._name(split, rng)
                text += " " + self._pick(NAME_PARTS, split, rng).format(n=new["name"])
        else:
            new["name"] = self._name(split, rng)
            text = self._pick(ANSWER_NAME, split, rng).format(n=new["name"])
        reply, call = self._cancel_next(new)
        return Turn((self._user(opener), self._assistant(question), self._user(text)), reply,
                    "cancel" if call else "cancel_fill", None, call)

    def _cancel_result(self, rng, split):
        s = {"day": rng.choice(self.open_days), "name": self._name(split, rng)}
        text, _ = self._cancel_next(s)
        result = {"cancelled": rng.random() < 0.6}
        msgs = (self._user(self._cancel_text(s, rng, split)), self._assistant_call(text),
                {"role": "tool", "content": result_text(result)})
        return Turn(msgs, self.cancel_result_reply(s, result), "cancel_result", None)

    # ------------------------------------------------------------------ follow-ups
    def _follow(self, rng, split):
        """A question that only makes sense with the previous exchange."""
        kind = rng.choice(["price", "duration", "other_service", "other_day", "book_that",
                           "book_then", "orphan"])
        service = rng.choice(list(self.services))
        day = rng.choice(list(DAYS))
        prev_intent = rng.choice(["price", "duration"])
        if kind == "other_day" or kind == "book_then":
            prev_intent = "hours_day"
        prev_slot = day if prev_intent == "hours_day" else service
        prev_q = self._prev_question(prev_intent, prev_slot, rng)
        prev = (self._user(prev_q), self._assistant(self.answer(prev_intent, prev_slot)[0]))
        if kind == "price":
            text, intent, slot = self._pick(FOLLOW_PRICE, split, rng), "price", service
        elif kind == "duration":
            text, intent, slot = self._pick(FOLLOW_DURATION, split, rng), "duration", service
        elif kind == "other_service":
            other = rng.choice([s for s in self.services if s != service])
            text = self._pick(FOLLOW_OTHER, split, rng).format(x=self._alias(other, rng))
            intent, slot = prev_intent, other
        elif kind == "other_day":
            other = rng.choice([d for d in DAYS if d != day])
            text = self._pick(FOLLOW_OTHER, split, rng).format(
                x=rng.choice(["", "on ", "on ", "for "]) + other).replace("  ", " ")
            intent, slot = "hours_day", other
        elif kind in ("book_that", "book_then"):
            text = self._pick(FOLLOW_BOOK, split, rng)
            s = {"day": day} if kind == "book_then" else {"service": service}
            return Turn(prev + (self._user(text),), self.ask(s), "follow:book", None)
        else:  # no service in context: ask which one
            prev_intent = rng.choice(["hours_week", "address", "phone", "greeting"])
            prev = (self._user(self._prev_question(prev_intent, None, rng)),
                    self._assistant(self.answer(prev_intent)[0]))
            if rng.random() < 0.3:
                prev = ()
            which = rng.choice(["price", "duration"])
            text = self._pick(FOLLOW_PRICE if which == "price" else FOLLOW_DURATION, split, rng)
            return Turn(prev + (self._user(text),), self.clarify_service(which),
                        "follow:clarify", None)
        if rng.random() < 0.3:
            text += "?"
        prev_kind = "follow:" + intent
        return Turn(prev + (self._user(text),), self.answer(intent, slot)[0], prev_kind, slot)

    @staticmethod
    def clarify_service(which: str) -> str:
        return ("Sorry, which service would you like the price for?" if which == "price"
                else "Sorry, which service do you mean?")

    def _prev_question(self, intent: str, slot: str | None, rng: random.Random) -> str:
        alias = self._alias(slot, rng) if slot in self.services else None
        table = {
            "price": ["how much is {a}", "what does {a} cost", "price of {a}"],
            "duration": ["how long does {a} take", "how long is {a}"],
            "hours_day": ["are you open on {d}", "what are your hours on {d}", "{d} hours"],
            "hours_week": ["what are your hours", "when are you open"],
            "address": ["what's your address", "where are you"],
            "phone": ["what's your number", "phone number please"],
            "greeting": ["hi there", "hello"],
        }
        return rng.choice(table[intent]).format(a=alias, d=slot)

    # ------------------------------------------------------------------ shapes
    def _reply_patterns(self) -> list[re.Pattern]:
        svc = "|".join(re.escape(s.spoken) for s in self.facts.services)
        day = "|".join(d.capitalize() for d in DAYS)
        t = r"\d{1,2}(?::\d\d)? [ap]m"
        ts = rf"{t}(?:(?:, {t})*,? or {t})?"
        name = r"[a-z' ]{1,40}"
        pats = [
            rf"Sure, what would you like to come in for(?: on (?:{day}))?(?: at {t})?\?",
            rf"Sure, what day would you like to come in for (?:{svc})(?: at {t})?\?",
            rf"Sorry, we're closed on (?:{day})s\. What other day would work for (?:{svc})\?",
            rf"What time on (?:{day}) would you like to come in for (?:{svc})\?",
            rf"And what name should I put (?:{svc}) on (?:{day}) at {t} under\?",
            rf"You're booked for (?:{svc}) on (?:{day}) at {t}\.",
            rf"Sorry, (?:{day}) at {t} is taken\. I can do {ts} instead\.",
            rf"Sorry, (?:{day}) is fully booked\. Would another day work\?",
            rf"Yes, (?:{day}) at {t} is free for (?:{svc})\. What name should I put it under\?",
            rf"On (?:{day}) we have {ts} free for (?:{svc})\. Which would you like\?",
            rf"Sorry, we have nothing free on (?:{day}) for (?:{svc})\. Would another day work\?",
            rf"Sure, which day is the appointment(?: under {name})? you'd like to cancel\?",
            rf"And what name is the (?:{day}) appointment under\?",
            rf"Your (?:{day}) appointment is cancelled\.",
            rf"Sorry, I couldn't find an appointment on (?:{day}) under that name\.",
        ]
        fixed = [self.error_reply(), self.clarify_service("price"),
                 self.clarify_service("duration")]
        return [re.compile(p) for p in pats] + [re.compile(re.escape(f)) for f in fixed]

    def is_flow_reply(self, text: str) -> bool:
        text = text.strip()
        if text.startswith("<tool_call>"):
            parsed = parse_tool_call(text)
            if parsed is None or not text.endswith("</tool_call>"):
                return False
            from diffvoice.engine.train.tool_schemas import validate_args
            try:
                return validate_args(parsed[0], parsed[1], self.schemas)
            except ValueError:
                return False
        return any(p.fullmatch(text) for p in self._reply_res)
