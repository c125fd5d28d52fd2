"""receptionist_for: off / on / auto (only a model trained for tools gets them by default)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from test_book import facts_file  # noqa: E402

from diffvoice.engine.testing import make_random_checkpoint  # noqa: E402
from diffvoice.engine.tokenizer import ChatTokenizer  # noqa: E402
from diffvoice.voice.config import ServeConfig  # noqa: E402
from diffvoice.voice.receptionist.setup import receptionist_for  # noqa: E402


def test_modes(tmp_path):
    model = make_random_checkpoint(tmp_path / "m", family="sdar")
    engine = SimpleNamespace(tokenizer=ChatTokenizer.from_dir(model))
    config = ServeConfig(model=str(model), appointments_db=str(tmp_path / "b.sqlite3"))
    warnings: list[str] = []
    assert receptionist_for(config.replace(receptionist_tools="off"), engine, warnings) is None
    # auto: no facts.yaml and no <tool_call> token -> nothing, silently
    assert receptionist_for(config, engine, warnings) is None and not warnings
    with pytest.raises(ValueError, match="receptionist_tools"):  # on: the missing sheet is named
        receptionist_for(config.replace(receptionist_tools="on"), engine, warnings)
    (model / "facts.yaml").write_text(facts_file(tmp_path).read_text())
    tools = receptionist_for(config.replace(receptionist_tools="on"), engine, warnings)
    assert tools.book.path == tmp_path / "b.sqlite3" and tools.book.path.is_file()
    doc = yaml.safe_load((model / "facts.yaml").read_text())
    doc["services"][0]["duration"] = "a while"
    doc["services"][0].pop("minutes", None)
    (model / "facts.yaml").write_text(yaml.safe_dump(doc))
    # a duration the sheet cannot parse reserves the fact sheet's documented default, 60 minutes
    # (engine.train.facts Service.minutes)
    tools = receptionist_for(config.replace(receptionist_tools="on"), engine, warnings)
    assert tools.book.durations[doc["services"][0]["name"]] == 60


def test_config_rejects_unknown_mode():
    with pytest.raises(ValueError, match="receptionist_tools"):
        ServeConfig(receptionist_tools="maybe")
