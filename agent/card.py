"""What the demo page says about the agent it talks to: `agent_card(model_dir) -> dict | None`.

From the model's fact sheet (facts.yaml): the business, its kind, the assistant's name and three
example questions the receptionist is trained to answer (opening hours on an open day, the price
of the first service, a booking of it). None for a model without a fact sheet (a general chat
model): the page then shows the model's name only. Served as `GET /agent` (voice.server).
"""

from __future__ import annotations

from pathlib import Path


def agent_card(model_dir: str | Path) -> dict | None:
    from diffvoice.agent.facts import load_facts

    sheet = Path(model_dir) / "facts.yaml"
    if not sheet.is_file():
        return None
    try:
        facts = load_facts(sheet)
    except (OSError, ValueError):
        return None
    open_days = [day for day, hours in facts.hours if hours != "closed"]
    examples = []
    if open_days:
        examples.append(f"When are you open on {open_days[-1].capitalize()}?")
    if facts.services:
        service = facts.services[0]
        examples.append(f"How much is {service.spoken}?")
        if open_days:
            examples.append(f"Can I book {service.spoken} on {open_days[0].capitalize()} "
                            "at 10 am?")
    return {"business": facts.name, "kind": facts.kind, "assistant": facts.assistant_name,
            "examples": examples}
