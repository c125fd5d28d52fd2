"""receptionist_for: off / on / auto (only a model trained for tools gets them by default)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml
from book_facts import facts_file  # noqa: E402

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
    assert tools.book.max_open_per_owner == 3  # --max-bookings-per-caller reaches the book
    tools = receptionist_for(config.replace(receptionist_tools="on", max_bookings_per_caller=5),
                             engine, warnings)
    assert tools.book.max_open_per_owner == 5
    doc = yaml.safe_load((model / "facts.yaml").read_text())
    doc["services"][0]["duration"] = "a while"
    doc["services"][0].pop("minutes", None)
    (model / "facts.yaml").write_text(yaml.safe_dump(doc))
    # a duration the sheet cannot parse reserves the fact sheet's documented default, 60 minutes
    # (agent.facts Service.minutes)
    tools = receptionist_for(config.replace(receptionist_tools="on"), engine, warnings)
    assert tools.book.durations[doc["services"][0]["name"]] == 60


def test_the_book_defaults_to_the_users_data_directory(tmp_path, monkeypatch, capsys):
    """Not the model directory (inside site-packages after a wheel install): the user's data
    directory (platformdirs; XDG_DATA_HOME on Linux), one book per model, printed at start-up."""
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    model = make_random_checkpoint(tmp_path / "my-model", family="sdar")
    (model / "facts.yaml").write_text(facts_file(tmp_path).read_text())
    engine = SimpleNamespace(tokenizer=ChatTokenizer.from_dir(model))
    config = ServeConfig(model=str(model), receptionist_tools="on")
    tools = receptionist_for(config, engine, [])
    want = tmp_path / "data" / "diffvoice" / "my-model" / "appointments.sqlite3"
    assert tools.book.path == want and want.is_file()
    assert not list(model.glob("*.sqlite3"))
    assert f"appointment book {want}" in capsys.readouterr().out


def test_config_rejects_unknown_mode():
    with pytest.raises(ValueError, match="receptionist_tools"):
        ServeConfig(receptionist_tools="maybe")


def test_paraphrase_modes(tmp_path):
    """paraphrase_for: off -> nothing; auto without a fact sheet -> nothing, silently; on without
    one -> an error naming it; with the shipped receptionist -> the snap the server's agent hears
    callers through (agent_of)."""
    from diffvoice.engine.assets import default_model_dir
    from diffvoice.voice.receptionist.setup import agent_of, paraphrase_for

    model = make_random_checkpoint(tmp_path / "m", family="sdar")
    config = ServeConfig(model=str(model))
    warnings: list[str] = []
    assert paraphrase_for(config.replace(paraphrase="off"), warnings) is None
    assert paraphrase_for(config, warnings) is None and not warnings
    with pytest.raises(ValueError, match="paraphrase"):
        paraphrase_for(config.replace(paraphrase="on"), warnings)
    # a threshold that is not the default (0.7)
    shipped = ServeConfig(model=str(default_model_dir()), paraphrase_threshold=0.6)
    snap = paraphrase_for(shipped, warnings)
    assert snap.threshold == 0.6 and not warnings
    agent = agent_of(SimpleNamespace(config=shipped.replace(clarify="off"), snap=snap,
                                     agent=None))
    asked = agent.rewrite([{"role": "user", "content": "whereabouts are you"}])
    assert asked[-1]["content"] == "where are you located"  # similarity 0.69
    with pytest.raises(ValueError, match="paraphrase"):
        ServeConfig(paraphrase="maybe")
    with pytest.raises(ValueError, match="paraphrase_threshold"):
        ServeConfig(paraphrase_threshold=1.5)
    # intent snapping: on at the default, its threshold from the config, off above 1
    assert snap.intent_threshold == ServeConfig().paraphrase_intent
    assert snap.verified is not None  # the shipped record of questions answered as trained
    off = paraphrase_for(shipped.replace(paraphrase_intent=1.01), warnings)
    assert off.intent_threshold is None and not warnings
    with pytest.raises(ValueError, match="paraphrase_intent"):
        ServeConfig(paraphrase_intent=-0.1)
