"""Closed-loop booking calls: a scripted caller books through the model's OWN replies.

    report = asyncio.run(run_episodes(engine, gen, params, n=60, seed=7))
Unlike the dialogue set (each turn's history is the ideal one), an episode feeds the model's
replies back: the caller
opens with a held-out phrasing carrying some of service / day / time / name
(dialogues.Dialogues._opener, split "heldout", held-out caller names), then answers whatever the
model asks ("what day ...?" -> a held-out day answer, "what time ...?" -> a time, "what name
...?" -> the name, "what would you like to come in for ...?" -> the service), up to MAX_TURNS
model replies (an offer of free times, "... Which would you like?" or "... instead.", is answered
with the wanted time). Tool calls get results from an in-memory book that is free everywhere
(check_availability -> the asked time first, then the grid's next ones; book_appointment ->
{"booked": true}); after a tool result the model must speak (tool_choice "none", as the voice
service does with one call per caller turn). An episode SUCCEEDS when the model's first
book_appointment call has the right service, day, time and name; it is CONFIRMED when the reply
after the result is the exact spoken confirmation (Dialogues.book_result_reply). A reply the
caller cannot place (not a call, not a slot question) ends the episode as failed. Each text
reply is what the server would say (agent.pipeline.serve: grounding, then the clarify
guard; after a tool result an unsure or malformed reply becomes the trained result reply, else
the clarifying question, which the caller cannot place). Knows nothing about the engine's
internals: it calls `engine.generate(messages, params)`.
"""

from __future__ import annotations

import dataclasses
import json
import random

from diffvoice.agent.dialogues import (
    ANSWER_DAY,
    ANSWER_NAME,
    ANSWER_SERVICE,
    ANSWER_TIME,
    say_time,
)
from diffvoice.agent.tool_schemas import parse_tool_call, result_text, slot_times
from diffvoice.agent.train.asking import ask

MAX_TURNS = 6


def _asked(reply: str) -> str | None:
    low = reply.lower()
    for key, cues in (("name", ("what name", "name should i")),
                      ("time", ("what time", "which would you like", "instead")),
                      ("day", ("what day", "other day")),
                      ("service", ("come in for", "which service"))):
        if any(c in low for c in cues):
            return key
    return None


def _answer(d, slot: str, s: dict, rng: random.Random) -> str:
    if slot == "service":
        return rng.choice(ANSWER_SERVICE["heldout"]).format(s=d._alias(s["service"], rng))
    if slot == "day":
        return rng.choice(ANSWER_DAY["heldout"]).format(d=s["day"])
    if slot == "time":
        return rng.choice(ANSWER_TIME["heldout"]).format(t=say_time(s["time"], rng))
    return rng.choice(ANSWER_NAME["heldout"]).format(n=s["name"])


def _result(d, name: str, args: dict) -> dict:
    if name == "check_availability":
        grid = slot_times(d.hours.get(args.get("day"), "closed"))
        want = [args["time"]] if args.get("time") in grid else []
        return {"available": (want + [t for t in grid if t not in want])[:3]}
    if name == "book_appointment":
        return {"booked": True}
    return {"cancelled": False}


async def _episode(engine, gen, params, agent, rng: random.Random) -> dict:
    d = gen.dialogues
    day = rng.choice(d.open_days)
    want = {"service": rng.choice(list(d.services)), "day": day,
            "time": rng.choice(slot_times(d.hours[day])), "name": d._name("heldout", rng)}
    given = {k: v for k, v in want.items() if rng.random() < (0.75 if k == "service" else 0.5)}
    messages = [{"role": "user", "content": d._opener(given, "heldout", rng)}]
    out = {"want": want, "said": [messages[0]["content"]], "turns": [], "success": False,
           "confirmed": False}
    booked = None
    for _ in range(MAX_TURNS):
        turn_params = params
        if params.tools and messages[-1]["role"] == "tool":  # as the voice service: one call
            turn_params = dataclasses.replace(params, tool_choice="none")  # per caller turn
        asked = await ask(agent, engine, messages, turn_params)
        text, call = asked.text, asked.call
        if call is None:
            parsed = parse_tool_call(text)
            call = parsed and {"name": parsed[0], "arguments": json.dumps(parsed[1])}
        if call is None:  # what the caller hears: the agent's rules, as served (serve())
            text = asked.final
        out["turns"].append(call or text.strip())
        if booked is not None:  # the reply after the booking result: the confirmation
            out["confirmed"] = text.strip() == d.book_result_reply(booked, {"booked": True})
            break
        if call:
            args = json.loads(call["arguments"])
            messages += [{"role": "assistant", "content": None, "tool_calls": [{
                "id": "call_0", "type": "function",
                "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                {"role": "tool", "content": result_text(_result(d, call["name"], args))}]
            if call["name"] == "book_appointment":
                out["success"] = args == want
                booked = args
                if not out["success"]:
                    break
            continue
        slot = _asked(text)
        if slot is None:
            break
        messages += [{"role": "assistant", "content": text.strip()},
                     {"role": "user", "content": _answer(d, slot, want, rng)}]
        out["said"].append(messages[-1]["content"])
    return out


async def run_episodes(engine, gen, params, agent, n: int = 60, seed: int = 7) -> dict:
    # one generator per episode: a change in one call's replies leaves the others' callers as
    # they were, so two runs compare call for call
    eps = [await _episode(engine, gen, params, agent, random.Random(seed * 1000 + i))
           for i in range(n)]
    return {"n": n, "success_rate": sum(e["success"] for e in eps) / max(1, n),
            "confirmed_rate": sum(e["confirmed"] for e in eps) / max(1, n),
            "mean_model_turns": sum(len(e["turns"]) for e in eps) / max(1, n),
            "failures": [e for e in eps if not e["success"]][:20],
            "samples": eps[:: max(1, n // 6)]}
