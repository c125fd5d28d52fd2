"""A fact sheet the appointment book can use (tests of agent/book.py, agent/tools.py and the
server's receptionist set-up import it by name: tests/ is on sys.path through tests/conftest.py)."""

from pathlib import Path

import yaml

from diffvoice.agent.book import duration_minutes
from diffvoice.agent.facts import DEFAULT_FACTS_PATH


def facts_file(tmp_path: Path) -> Path:
    """The default fact sheet, every duration in minutes (the book needs them)."""
    doc = yaml.safe_load(DEFAULT_FACTS_PATH.read_text())
    for service in doc["services"]:
        try:
            duration_minutes(service["duration"], service["name"])
        except ValueError:
            service["duration"] = "1 hour"
    path = tmp_path / "facts.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path
