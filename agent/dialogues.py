"""Multi-turn training/eval examples, part 1: booking and slot filling (the `Dialogues` class).

`Dialogues(facts, answer)` (answer = DataGenerator.answer) builds `Turn`s: the chat `messages`
(OpenAI format: the previous exchange, the current user message, and the current turn's tool call
and tool result when there is one) and the ONE reply the model must give: a spoken sentence or a
tool call's wire text (agent.tool_schemas). Slot-filling questions restate every slot known
so far ("And what name should I put a cleaning on Friday at 10 am under?"), so one previous
exchange carries the whole booking state. `split` ("train" / "heldout") selects disjoint phrasing
lists and disjoint caller names (agent.dialogue_phrases), so held-out booking accuracy is
measured on unseen phrasings. Availability checks, cancelling and follow-up questions are built by
the `OtherFlows` mixin (agent.dialogue_flows). `is_flow_reply(text)` recognises every reply
shape these flows produce (for the well-formed rate). Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import json
import random
import re

from diffvoice.agent.dialogue_flows import OtherFlows
from diffvoice.agent.dialogue_phrases import (  # noqa: F401  (re-exported)
    ANSWER_DAY,
    ANSWER_NAME,
    ANSWER_SERVICE,
    ANSWER_TIME,
    ASK_TIMES,
    BOOK_VERBS,
    DAY_PARTS,
    FIRST,
    FIRST_HELD,
    LAST,
    LAST_HELD,
    NAME_PARTS,
    NO_SERVICE,
    TIME_PARTS,
    Turn,
    made_up_name,
    say_time,
    spoken_times,
)
from diffvoice.agent.facts import DAYS, FactSheet
from diffvoice.agent.tool_schemas import (
    parse_tool_call,
    result_text,
    slot_times,
    spoken_time,
    tool_call_json,
    tool_call_text,
    tool_schemas,
)

HELD_NAMES = frozenset(FIRST_HELD) | frozenset(LAST_HELD)


class Dialogues(OtherFlows):
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
        """A caller's name: held-out lists for "heldout"; for training, known names or (30% of
        the parts) made-up ones, never a held-out name."""
        if split != "train":  # (the draws of v2's held-out set, unchanged)
            return rng.choice(FIRST_HELD) if rng.random() < 0.25 else \
                f"{rng.choice(FIRST_HELD)} {rng.choice(LAST_HELD)}"

        def part(names):
            if rng.random() < 0.3:
                made = made_up_name(rng)
                if made not in HELD_NAMES:
                    return made
            return rng.choice(names)
        first, last = part(FIRST), part(LAST)
        return first if rng.random() < 0.25 else f"{first} {last}"

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

    def slot_question(self, messages: list[dict]) -> str | None:
        """Mid-booking (the assistant's last message was a slot-filling question), the next
        question for the slots the conversation holds — what to say instead of the generic
        clarifying question when the model's own reply was unsure. Slots are read the way the
        tools' arguments are narrowed (engine.constrained.context: the caller's newest mention
        first; a name only where one was given); None outside a booking, or when every slot is
        known (the model should have called; the guard's question stands)."""
        prior = [m for m in messages if m.get("role") == "assistant"
                 and isinstance(m.get("content"), str)]
        if not messages or messages[-1].get("role") != "user" or not prior:
            return None
        asked = prior[-1]["content"].strip()
        if not self.is_flow_reply(asked) or not asked.endswith("?") or "name" not in \
                asked.lower() and not any(c in asked.lower() for c in (
                    "what time", "what day", "other day", "come in for")):
            return None
        return self.next_question(messages)

    def next_question(self, messages: list[dict]) -> str | None:
        """The slot-filling question for the slots `messages` hold (read as `slot_question`
        reads them), None when every slot is known or the caller has not spoken."""
        from diffvoice.agent.facts import service_aliases
        from diffvoice.agent.grounding import ALL_TIMES, daytime_reading
        from diffvoice.engine.constrained.context import FUNCTION_WORDS, aliased, mentioned, spans

        if not messages or messages[-1].get("role") != "user":
            return None
        s: dict = {}
        aliases = service_aliases(self.facts)
        for m in reversed(messages):  # the newest message naming exactly one service decides
            text = m.get("content")
            said = aliased(list(aliases), text.lower(), aliases) \
                if m.get("role") in ("user", "assistant") and isinstance(text, str) else set()
            if len(said) == 1:
                s["service"] = said.pop()
                break
        days = [d for d in mentioned(list(DAYS), messages) if d]
        if len(days) == 1:
            s["day"] = days[0]
        times = [t for t in mentioned(list(ALL_TIMES), messages) if t]
        times = daytime_reading(times) if len(times) == 2 else times
        if len(times) == 1:
            s["time"] = times[0]
        words = frozenset(w for a in aliases.values() for x in a for w in x.split()) \
            | frozenset(DAYS)
        names = spans(messages, skip=FUNCTION_WORDS | words, cued=True)
        if names:
            s["name"] = names[0]
        if all(s.get(k) for k in ("service", "day", "time", "name")):
            return None
        return self.ask(s)

    def book_result_reply(self, args: dict, result: dict) -> str:
        when = f"{args['day'].capitalize()} at {spoken_time(args['time'])}"
        if result.get("booked"):
            return f"You're booked for {self._spoken(args['service'])} on {when}."
        alts = result.get("alternatives") or []
        if alts:
            return f"Sorry, {when} is taken. I can do {spoken_times(alts)} instead."
        return f"Sorry, {args['day'].capitalize()} is fully booked. Would another day work?"

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
            from diffvoice.agent.tool_schemas import validate_args
            try:
                return validate_args(parsed[0], parsed[1], self.schemas)
            except ValueError:
                return False
        return any(p.fullmatch(text) for p in self._reply_res)
