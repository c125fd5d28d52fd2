"""The `openai` SDK's client pointed at the live server (tests/voice/conftest.py)."""

import pytest
from openai import AsyncOpenAI


@pytest.fixture(scope="module")
def sdk(live_server):
    host = live_server.ws_url.split("://", 1)[1].split("/", 1)[0]
    return AsyncOpenAI(api_key="unused", websocket_base_url=f"ws://{host}/v1",
                       base_url=f"http://{host}/v1")
