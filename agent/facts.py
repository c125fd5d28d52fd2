"""The fact sheet: a YAML description of one business, loaded into frozen, validated dataclasses.

`load_facts(path) -> FactSheet` raises ValueError naming the offending field (with the file name)
for anything the data generator could not use. The schema is documented by the shipped example,
agent/default_facts.yaml. Fields that contain the business name derive from it:
`contact.email` defaults to "hello at {spoken_name} dot com" and `contact.website` to
"{spoken_name} dot com" (spoken_name = the name lower-cased, "&" read as "and", other punctuation
dropped), and every answer text may use the placeholders {name}, {spoken_name}, {phone}, {email},
{website}, so renaming the business renames them all.
Knows nothing about templates, tokenizers or models.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import yaml

DAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
# the shipped example the default model was trained on: package data beside this module, so a
# source checkout, an editable install and a wheel install find it alike
DEFAULT_FACTS_PATH = Path(__file__).resolve().with_name("default_facts.yaml")


def default_facts_path() -> Path:
    """The shipped example fact sheet the default model was trained on."""
    return DEFAULT_FACTS_PATH
_HOURS_RE = re.compile(r"^\d{1,2}(:\d\d)? ?(am|pm) to \d{1,2}(:\d\d)? ?(am|pm)$")
_ID_RE = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Service:
    name: str
    spoken: str               # "a cleaning": how the agent starts a sentence about it
    aliases: tuple[str, ...]  # how callers say it
    price: str                # "95 dollars"
    duration: str             # "45 minutes" (spoken)
    minutes: int = 60         # how long the appointment book reserves (from duration, or given)


@dataclass(frozen=True)
class FaqItem:
    id: str
    questions: tuple[str, ...]
    answer: str
    fact: str


@dataclass(frozen=True)
class FactSheet:
    name: str
    kind: str
    assistant_name: str
    hours: tuple[tuple[str, str], ...]  # (day, "8 am to 5 pm" | "closed") for all seven days
    address: str
    directions: str
    directions_fact: str
    phone: str
    email: str
    website: str
    services: tuple[Service, ...]
    booking_answer: str
    booking_fact: str
    faq: tuple[FaqItem, ...]

    def __post_init__(self) -> None:
        aliases: dict[str, str] = {}
        for service in self.services:
            for alias in service.aliases:
                other = aliases.setdefault(alias.lower(), service.name)
                if other != service.name:
                    raise ValueError(
                        f"services: alias {alias!r} is used by both {other!r} and {service.name!r}")
        ids = [item.id for item in self.faq]
        if len(ids) != len(set(ids)):
            raise ValueError(f"faq: ids must be unique, got {ids}")
        for item in self.faq:
            if item.fact.lower() not in item.answer.lower():
                raise ValueError(f"faq[{item.id}].fact {item.fact!r} must appear in its answer")
        if self.booking_fact.lower() not in self.booking_answer.lower():
            raise ValueError(f"booking.fact {self.booking_fact!r} must appear in booking.answer")
        if self.directions_fact.lower() not in self.directions.lower():
            raise ValueError(
                f"location.directions_fact {self.directions_fact!r} must appear in directions")


def _text(section: dict, key: str, where: str) -> str:
    value = section.get(key)
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key} must be a non-empty string, got {value!r}")
    return " ".join(value.split())


def _section(doc: dict, key: str, kind: type = dict):
    value = doc.get(key)
    if not isinstance(value, kind) or not value:
        raise ValueError(f"{key} must be a non-empty {kind.__name__}, got {value!r}")
    return value


PLACEHOLDERS = ("name", "spoken_name", "phone", "email", "website")


def service_aliases(facts: FactSheet) -> dict[str, list[str]]:
    """Each service's `name` -> the phrases that name it: its aliases and its spoken form, lower
    case (the "x-diffvoice-aliases" of the served tools, and how replies are read back)."""
    return {sv.name: sorted({*(a.lower() for a in sv.aliases), sv.spoken.lower()})
            for sv in facts.services}


def spoken_name(name: str) -> str:
    """'Bluebird Dental' -> 'bluebird dental'; 'Smith & Sons, Inc.' -> 'smith and sons inc'."""
    text = name.lower().replace("&", " and ")
    return " ".join(re.sub(r"[^a-z0-9' ]+", " ", text).split())


def _fill(text: str, values: dict[str, str], where: str) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    leftover = re.search(r"\{[a-z_]+\}", text)
    if leftover:
        raise ValueError(f"{where}: unknown placeholder {leftover.group(0)}; "
                         f"known: {', '.join('{' + k + '}' for k in PLACEHOLDERS)}")
    return text


def _minutes(value, duration: str, where: str) -> int:
    """`minutes:` if given, else parsed from a duration like "45 minutes" / "1 hour", else 60
    (a duration such as "2 visits" says nothing about one appointment's length)."""
    if value is None:
        match = re.fullmatch(r"(\d+) (minutes?|hours?)", duration.lower())
        if not match:
            return 60
        value = int(match.group(1)) * (60 if match.group(2).startswith("hour") else 1)
    if not isinstance(value, int) or isinstance(value, bool) or not 5 <= value <= 600:
        raise ValueError(f"{where}.minutes must be an integer from 5 to 600, got {value!r}")
    return value


def parse_facts(doc: dict) -> FactSheet:
    """Validate a parsed YAML document (see default_facts.yaml) into a FactSheet."""
    if not isinstance(doc, dict):
        raise ValueError(f"the fact sheet must be a YAML mapping, got {type(doc).__name__}")
    business = _section(doc, "business")
    hours_doc = _section(doc, "hours")
    hours = []
    for day in DAYS:
        value = _text(hours_doc, day, "hours").lower()
        if value != "closed" and not _HOURS_RE.match(value):
            raise ValueError(
                f"hours.{day} must be 'closed' or like '8 am to 5 pm', got {value!r}")
        hours.append((day, value))
    unknown_days = set(hours_doc) - set(DAYS)
    if unknown_days:
        raise ValueError(f"hours: unknown day(s) {sorted(unknown_days)}; use {DAYS}")
    location, booking = (_section(doc, k) for k in ("location", "booking"))
    contact = doc.get("contact") or {}
    if not isinstance(contact, dict):
        raise ValueError(f"contact must be a mapping, got {contact!r}")
    name = _text(business, "name", "business")
    values = {"name": name, "spoken_name": spoken_name(name),
              "phone": _text(contact, "phone", "contact")}
    values["email"] = _fill(_text({"email": contact.get("email") or
                                   "hello at {spoken_name} dot com"}, "email", "contact"),
                            values, "contact.email")
    values["website"] = _fill(_text({"website": contact.get("website") or "{spoken_name} dot com"},
                                    "website", "contact"), values, "contact.website")
    services = []
    for i, raw in enumerate(_section(doc, "services", list)):
        where = f"services[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a mapping, got {raw!r}")
        aliases = raw.get("aliases")
        if not isinstance(aliases, list) or not aliases:
            raise ValueError(f"{where}.aliases must be a non-empty list, got {aliases!r}")
        duration = _text(raw, "duration", where)
        services.append(Service(
            name=_text(raw, "name", where), spoken=_text(raw, "spoken", where),
            aliases=tuple(" ".join(str(a).lower().split()) for a in aliases),
            price=_text(raw, "price", where), duration=duration,
            minutes=_minutes(raw.get("minutes"), duration, where)))
    faq = []
    for i, raw in enumerate(doc.get("faq") or []):
        where = f"faq[{i}]"
        if not isinstance(raw, dict):
            raise ValueError(f"{where} must be a mapping, got {raw!r}")
        item_id = _text(raw, "id", where)
        if not _ID_RE.match(item_id):
            raise ValueError(f"{where}.id must be lower_snake_case, got {item_id!r}")
        questions = raw.get("questions")
        if not isinstance(questions, list) or len(questions) < 3:
            raise ValueError(f"{where}.questions needs at least 3 phrasings (one is held out)")
        faq.append(FaqItem(
            id=item_id, questions=tuple(" ".join(str(q).lower().split()) for q in questions),
            answer=_fill(_text(raw, "answer", where), values, where + ".answer"),
            fact=_fill(_text(raw, "fact", where), values, where + ".fact")))
    return FactSheet(
        name=name, kind=_text(business, "kind", "business"),
        assistant_name=_text(business, "assistant_name", "business"), hours=tuple(hours),
        address=_text(location, "address", "location"),
        directions=_fill(_text(location, "directions", "location"), values, "location.directions"),
        directions_fact=_text(location, "directions_fact", "location"),
        phone=values["phone"], email=values["email"], website=values["website"],
        services=tuple(services),
        booking_answer=_fill(_text(booking, "answer", "booking"), values, "booking.answer"),
        booking_fact=_fill(_text(booking, "fact", "booking"), values, "booking.fact"),
        faq=tuple(faq))


def load_facts(path: str | Path = DEFAULT_FACTS_PATH) -> FactSheet:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"{path}: cannot read fact sheet: {exc}") from exc
    try:
        return parse_facts(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from exc
