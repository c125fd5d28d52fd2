"""The API says when the loaded model's chat template leaves messages out: the shipped
receptionist renders one previous exchange and no system prompt, so a system prompt and older
turns are reported in the `x-diffvoice-dropped` header (and logged)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from diffvoice.engine import DEFAULT_MODEL_DIR, Engine, EngineConfig
from diffvoice.voice.openai_api import make_router

pytestmark = pytest.mark.skipif(not (DEFAULT_MODEL_DIR / "model.safetensors").is_file(),
                                reason="models/receptionist-tiny not present")


@dataclass(frozen=True)
class _Config:
    api_keys: tuple[str, ...] = ()
    max_new_tokens: int | None = 16
    steps_per_block: int | None = None


@dataclass
class _State:
    engine: Engine
    config: _Config


def test_dropped_system_prompt_and_old_turns_are_reported(caplog, monkeypatch):
    monkeypatch.setattr("diffvoice.voice.openai_api.router._DROPPED_WARNED", set())
    engine = Engine.from_pretrained(DEFAULT_MODEL_DIR, EngineConfig(max_running=2))
    app = FastAPI()
    app.include_router(make_router(_State(engine, _Config())))
    turns = [{"role": "user", "content": "what are your hours"},
             {"role": "assistant", "content": "We're open weekdays."},
             {"role": "user", "content": "how much is a crown"},
             {"role": "assistant", "content": "A crown is 900 dollars."},
             {"role": "user", "content": "and how long does it take"}]
    try:
        with TestClient(app) as client:
            def ask(messages):
                return client.post("/v1/chat/completions",
                                   json={"model": engine.model_name, "messages": messages})

            pirate = ask([{"role": "system", "content": "Talk like a pirate."}, *turns])
            plain = ask(turns[2:])
    finally:
        engine.close()
    assert pirate.status_code == 200 and plain.status_code == 200
    expected = engine.tokenizer.dropped([{"role": "system", "content": "Talk like a pirate."},
                                         *turns])
    assert expected.get("system") == 1 and expected.get("history", 0) >= 1
    assert pirate.headers["x-diffvoice-dropped"] == ",".join(
        f"{k}={v}" for k, v in sorted(expected.items()))
    assert "x-diffvoice-dropped" not in plain.headers or "system" not in \
        plain.headers["x-diffvoice-dropped"]
    assert any("ignores" in r.getMessage() for r in caplog.records)


def test_the_log_warns_once_per_kind_of_dropped_message(caplog, monkeypatch):
    """A property of the model, not of a request: one WARNING per kind, DEBUG after that."""
    import logging
    from types import SimpleNamespace

    from diffvoice.voice.openai_api import router

    monkeypatch.setattr(router, "_DROPPED_WARNED", set())
    dropped = iter([{"history": 2}, {"history": 4}, {"history": 1, "system": 1}, {}])
    engine = SimpleNamespace(tokenizer=SimpleNamespace(dropped=lambda messages: next(dropped)))
    caplog.set_level(logging.DEBUG, logger=router.__name__)
    texts = [router._dropped_context(engine, [], f"r{i}") for i in range(4)]
    assert texts == ["history=2", "history=4", "history=1,system=1", ""]
    levels = [r.levelname for r in caplog.records if "ignores" in r.getMessage()]
    assert levels == ["WARNING", "DEBUG", "WARNING"]
