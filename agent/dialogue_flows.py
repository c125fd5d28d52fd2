"""Multi-turn training/eval examples, part 2: availability checks and their results, tool
errors, cancelling, and follow-up questions that lean on the previous exchange.

`OtherFlows` is a mixin of `agent.dialogues.Dialogues` (which supplies the shared helpers:
`_pick`, `_name`, `_alias`, `_spoken`, `_time`, `_call`, `_assistant_call`, `_user`, `_assistant`,
`_next`, `ask`, `answer`, `services`, `open_days`, `hours`, `facts`); each `_kind(rng, split)`
method returns one `Turn`. Knows nothing about tokenizers or models.
"""

from __future__ import annotations

import json
import random

from diffvoice.agent.dialogue_phrases import (
    ANSWER_DAY,
    ANSWER_NAME,
    ANSWER_TIME,
    AVAIL_OPENERS,
    CANCEL_OPENERS,
    FOLLOW_BOOK,
    FOLLOW_DURATION,
    FOLLOW_OTHER,
    FOLLOW_PRICE,
    NAME_PARTS,
    Turn,
    say_time,
    spoken_times,
)
from diffvoice.agent.facts import DAYS
from diffvoice.agent.tool_schemas import result_text, slot_times, spoken_time


class OtherFlows:
    """Availability, tool-error, cancel and follow-up builders (see module docstring)."""

    # ------------------------------------------------------------------ replies
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

    def result_reply(self, name: str, args: dict, result: dict) -> str | None:
        """The reply the model is trained to give after `name(args)` returned `result`, or None
        when the call or the result is not one of the flows' shapes."""
        try:
            if "error" in result:
                return self.error_reply()
            if name == "book_appointment" and "booked" in result:
                return self.book_result_reply(args, result)
            if name == "check_availability" and "available" in result:
                return self.avail_result_reply(args, result)
            if name == "cancel_appointment" and "cancelled" in result:
                return self.cancel_result_reply(args, result)
        except (KeyError, TypeError, AttributeError, ValueError):
            return None
        return None

    # ------------------------------------------------------------------ availability
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
