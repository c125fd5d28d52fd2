"""OpenAI-compatible API: the official `openai` client against the real router on loopback.

A tiny random-weight checkpoint (engine.testing) drives a real Engine; uvicorn serves a FastAPI app
holding only `voice.openai_api.make_router(state)` on 127.0.0.1 in a thread. Request parsing is
also tested directly (pure function) for the cases that need no server.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

import openai
import pytest
import uvicorn
from fastapi import FastAPI

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.voice.openai_api import EFFORT_PRESETS, OpenAIError, make_router, parse_chat_request

TIMEOUT_S = 30.0 * float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
API_KEY = "sk-test-diffvoice"
HELLO = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello there"}]


@dataclass(frozen=True)
class _Config:  # the ServeConfig fields the router reads
    api_keys: tuple[str, ...] = ()
    max_new_tokens: int | None = 24
    steps_per_block: int | None = None


@dataclass
class _State:
    engine: Engine
    config: _Config


class _LoopbackServer:
    """uvicorn on an ephemeral 127.0.0.1 port, in a daemon thread."""

    def __init__(self, state: _State) -> None:
        app = FastAPI()
        app.include_router(make_router(state))
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + TIMEOUT_S
        while not self._server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def client(self, api_key: str = "unused") -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base_url, api_key=api_key, max_retries=0,
                             timeout=TIMEOUT_S)

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(TIMEOUT_S)


def _engine(path, **config) -> Engine:
    engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True, **config))
    engine.warmup()
    return engine


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_random_checkpoint(tmp_path_factory.mktemp("openai") / "m", family="sdar")


@pytest.fixture(scope="module")
def engine(checkpoint):
    engine = _engine(checkpoint, max_running=4)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    server = _LoopbackServer(_State(engine, _Config()))
    yield server
    server.close()


@pytest.fixture(scope="module")
def auth_server(engine):
    server = _LoopbackServer(_State(engine, _Config(api_keys=("sk-other", API_KEY))))
    yield server
    server.close()


def _wait_idle(engine: Engine) -> float:
    """Seconds until the engine holds no request (fails after TIMEOUT_S)."""
    start = time.monotonic()
    while engine.active_request_ids():
        assert time.monotonic() - start < TIMEOUT_S, engine.active_request_ids()
        time.sleep(0.01)
    return time.monotonic() - start


# --- through the official client ---------------------------------------------------------------

def test_models_lists_the_engine_model(server, engine):
    client = server.client()
    assert [m.id for m in client.models.list().data] == [engine.model_name]
    assert client.models.retrieve(engine.model_name).id == engine.model_name


def test_non_streaming_matches_streaming_and_reports_usage(server, engine):
    client = server.client()
    # seeded sampling: this random model then commits text in several blocks (greedy holds all
    # of it back as incomplete UTF-8 until the end)
    kwargs = dict(model=engine.model_name, messages=HELLO, max_tokens=16, temperature=1.0, seed=2)
    completion = client.chat.completions.create(**kwargs)
    choice = completion.choices[0]
    assert completion.object == "chat.completion" and completion.id.startswith("chatcmpl-")
    assert choice.message.role == "assistant" and choice.finish_reason in ("stop", "length")
    usage = completion.usage
    assert usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 16
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens

    chunks = list(client.chat.completions.create(
        **kwargs, stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "chat.completion.chunk"
    with_choices = [c for c in chunks if c.choices]
    finish = [c.choices[0].finish_reason for c in with_choices]
    assert finish[-1] == choice.finish_reason and not any(finish[:-1])
    text = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert text == choice.message.content
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == usage.model_dump()
    assert all(c.usage is None for c in chunks[:-1])
    _wait_idle(engine)


def test_stream_emits_one_chunk_per_engine_delta(server, engine):
    """Each block the engine commits is forwarded at once, not gathered into one chunk."""
    params = SamplingParams(max_new_tokens=24, temperature=1.0, seed=2, ignore_eos=True,
                            steps_per_block=2)

    async def engine_pieces():
        return [d.text async for d in engine.generate(HELLO, params) if d.text]

    expected = asyncio.run(engine_pieces())
    assert len(expected) > 1  # this seed commits text in several blocks
    stream = server.client().chat.completions.create(
        model=engine.model_name, messages=HELLO, max_tokens=24, temperature=1.0, seed=2,
        stream=True, extra_body={"ignore_eos": True, "steps_per_block": 2})
    assert [c.choices[0].delta.content for c in stream if c.choices[0].delta.content] == expected


def test_max_tokens_gives_length_finish(server, engine):
    completion = server.client().chat.completions.create(
        model=engine.model_name, messages=HELLO, max_completion_tokens=8,
        extra_body={"ignore_eos": True})
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 8


def test_stop_string_cuts_the_answer_before_it(server, engine):
    client = server.client()
    kwargs = dict(model=engine.model_name, messages=HELLO, max_tokens=24, temperature=1.0,
                  seed=2, extra_body={"ignore_eos": True})
    full = client.chat.completions.create(**kwargs).choices[0].message.content
    stop = full[len(full) // 2:len(full) // 2 + 2]
    cut = client.chat.completions.create(**kwargs, stop=[stop]).choices[0]
    assert cut.message.content == full[:full.find(stop)] and cut.finish_reason == "stop"


@pytest.mark.parametrize("effort", ["minimal", "high"])
def test_reasoning_effort_and_knobs_are_accepted(server, engine, effort):
    completion = server.client().chat.completions.create(
        model=engine.model_name, messages=HELLO, max_tokens=8, reasoning_effort=effort,
        extra_body={"block_size": 2, "ignore_eos": True})
    assert completion.usage.completion_tokens == 8


def test_aborting_a_stream_frees_the_engine_slot(server, engine):
    client = server.client()
    passes_before = engine.stats()["passes"]
    max_tokens, steps_per_block = 1600, 4  # 1600 / block 4 * 4 = 1600 passes if never aborted
    stream = client.chat.completions.create(
        model=engine.model_name, messages=HELLO, max_tokens=max_tokens, stream=True,
        extra_body={"ignore_eos": True, "steps_per_block": steps_per_block})
    next(iter(stream))  # the role chunk: sent once the first block is committed
    assert len(engine.active_request_ids()) == 1
    stream.close()
    client.close()
    _wait_idle(engine)
    assert engine.stats()["passes"] - passes_before < max_tokens // 2  # stopped early: aborted
    # the slot is really free: a new request is served at once
    again = server.client().chat.completions.create(
        model=engine.model_name, messages=HELLO, max_tokens=4)
    assert again.usage.completion_tokens <= 4


def test_hanging_up_on_a_non_streamed_request_frees_the_engine_slot(server, engine):
    passes_before = engine.stats()["passes"]
    body = json.dumps({"model": engine.model_name, "messages": HELLO, "max_tokens": 1600,
                       "ignore_eos": True})
    connection = http.client.HTTPConnection(server.base_url.split("/")[2], timeout=TIMEOUT_S)
    connection.request("POST", "/v1/chat/completions", body,
                       {"Content-Type": "application/json"})
    deadline = time.monotonic() + TIMEOUT_S
    while not engine.active_request_ids():
        assert time.monotonic() < deadline, "the request never reached the engine"
        time.sleep(0.005)
    connection.close()  # hang up without reading the answer
    _wait_idle(engine)
    assert engine.stats()["passes"] - passes_before < 1600 // 2


@pytest.mark.parametrize("kwargs, param", [
    ({"n": 2}, "n"),
    ({"top_p": 0.5}, "top_p"),
    ({"temperature": 5}, "temperature"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"tools": [{"type": "retrieval"}]}, "tools[0]"),
    ({"reasoning_effort": "extreme"}, "reasoning_effort"),
    ({"extra_body": {"threshold": 1.5}}, "threshold"),
    ({"extra_body": {"policy": "magic"}}, "policy"),
    ({"extra_body": {"steps_per_block": 0}}, "steps_per_block"),
    ({"extra_body": {"frobnicate": 1}}, "frobnicate"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
    ({"messages": [{"role": "critic", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:,"}}]}]}, "messages[0].content[0]"),
    ({"messages": []}, "messages"),
])
def test_invalid_requests_get_400_in_openai_shape(server, engine, kwargs, param):
    request = {"model": engine.model_name, "messages": HELLO, **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(**request)
    assert caught.value.status_code == 400
    assert caught.value.body["type"] == "invalid_request_error"
    assert caught.value.param == param and caught.value.body["message"]


def test_malformed_json_gets_400(server):
    request = urllib.request.Request(f"{server.base_url}/chat/completions", data=b"{not json",
                                     headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=TIMEOUT_S)
    assert caught.value.code == 400
    assert b'"invalid_request_error"' in caught.value.read()


def test_unknown_model_gets_404(server):
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().chat.completions.create(model="gpt-4o", messages=HELLO)
    assert caught.value.code == "model_not_found" and caught.value.param == "model"
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("gpt-4o")


def test_auth_rejects_missing_and_wrong_keys(auth_server, engine):
    with pytest.raises(openai.AuthenticationError) as caught:
        auth_server.client(api_key="sk-wrong").chat.completions.create(
            model=engine.model_name, messages=HELLO, max_tokens=4)
    assert caught.value.status_code == 401 and caught.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        auth_server.client(api_key="sk-wrong").models.list()
    for headers in ({}, {"Authorization": f"Basic {API_KEY}"}):  # the client always sends one
        request = urllib.request.Request(f"{auth_server.base_url}/models", headers=headers)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=TIMEOUT_S)
        assert caught.value.code == 401
        assert json.loads(caught.value.read())["error"]["code"] == "missing_api_key"
    completion = auth_server.client(api_key=API_KEY).chat.completions.create(
        model=engine.model_name, messages=HELLO, max_tokens=4)
    assert completion.choices[0].message.content is not None


def test_overload_gets_503_while_the_only_slot_streams(checkpoint):
    engine = _engine(checkpoint, max_running=1, max_queued=0)
    server = _LoopbackServer(_State(engine, _Config()))
    try:
        busy = server.client().chat.completions.create(
            model=engine.model_name, messages=HELLO, max_tokens=1600, stream=True,
            extra_body={"ignore_eos": True})
        next(iter(busy))
        with pytest.raises(openai.InternalServerError) as caught:
            server.client().chat.completions.create(model=engine.model_name, messages=HELLO)
        assert caught.value.status_code == 503 and caught.value.code == "engine_overloaded"
        assert caught.value.response.headers["retry-after"] == "1"
        busy.close()
        _wait_idle(engine)
    finally:
        server.close()
        engine.close()


# --- request parsing (pure) --------------------------------------------------------------------

DEFAULTS = SamplingParams(max_new_tokens=24, steps_per_block=4)


def _parse(**body):
    return parse_chat_request({"model": "m", "messages": HELLO, **body}, model_ids=("m",),
                              defaults=DEFAULTS)


def test_parse_maps_fields_onto_sampling_params():
    chat = _parse(max_tokens=7, temperature=0.5, seed=11, stop="END", n=1, top_p=1, user="u",
                  messages=[{"role": "developer", "content": "sys"},
                            {"role": "user", "content": [{"type": "text", "text": "a"},
                                                         {"type": "text", "text": "b"}]}])
    assert chat.messages == ({"role": "system", "content": "sys"},
                             {"role": "user", "content": "ab"})
    assert (chat.params.max_new_tokens, chat.params.temperature, chat.params.seed,
            chat.params.stop) == (7, 0.5, 11, ("END",))
    assert _parse().params == DEFAULTS  # nothing given: the server's defaults


@pytest.mark.parametrize("effort", sorted(EFFORT_PRESETS))
def test_reasoning_effort_presets_and_explicit_knobs_win(effort):
    params = _parse(reasoning_effort=effort).params
    preset = EFFORT_PRESETS[effort]
    assert params.policy == preset.get("policy", DEFAULTS.policy)
    assert params.threshold == preset.get("threshold", DEFAULTS.threshold)
    scale = preset.get("steps_per_block_scale", 1)
    assert params.steps_per_block == DEFAULTS.steps_per_block * scale
    explicit = _parse(reasoning_effort=effort, policy="low_confidence", steps_per_block=3).params
    assert (explicit.policy, explicit.steps_per_block) == ("low_confidence", 3)


def test_effort_orders_denoising_passes():
    """More effort never means fewer passes per block."""
    steps = [_parse(reasoning_effort=e).params.steps_per_block
             for e in ("medium", "high", "xhigh", "max")]
    assert steps == sorted(steps) and steps[0] < steps[-1]
    assert _parse(reasoning_effort="minimal").params.threshold < \
        _parse(reasoning_effort="low").params.threshold


def test_knob_implications():
    assert _parse(threshold=0.8).params.policy == "threshold"
    assert _parse(entropy_bound=0.2).params.policy == "entropy"
    assert _parse(block_size=2, ignore_eos=True).params.block_size == 2
    assert _parse().params.decoding is None  # the model's own default (engine.loader)
    assert _parse(decoding="fast").params.decoding == "fast"
    with pytest.raises(OpenAIError) as caught:
        _parse(decoding="quick")
    assert caught.value.status == 400 and caught.value.param == "decoding"


def test_parse_errors_name_the_field():
    with pytest.raises(OpenAIError) as caught:
        _parse(max_tokens=5, max_completion_tokens=6)
    assert caught.value.status == 400 and caught.value.param == "max_tokens"
    with pytest.raises(OpenAIError) as caught:
        parse_chat_request({"model": "x", "messages": HELLO}, model_ids=("m",), defaults=DEFAULTS)
    assert caught.value.status == 404 and caught.value.code == "model_not_found"
    with pytest.raises(OpenAIError) as caught:
        _parse(seed=True)
    assert caught.value.param == "seed"


# --- chat_template_kwargs (vLLM's field), issue 13 ----------------------------------------------
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% endif %}{% endif %}")


@pytest.fixture(scope="module")
def thinking_server(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("think") / "m", family="sdar",
                                  tokenizer_kwargs={"chat_template": THINKING_TEMPLATE})
    engine = _engine(path, max_running=2)
    server = _LoopbackServer(_State(engine, _Config()))
    yield server, engine
    server.close()
    engine.close()


def test_chat_template_kwargs_reach_the_template(thinking_server):
    server, engine = thinking_server
    client = server.client()
    messages = [{"role": "user", "content": "Hi"}]

    def prompt_tokens(**extra):
        out = client.chat.completions.create(model=engine.model_name, messages=messages,
                                             max_tokens=4, **extra)
        return out.usage.prompt_tokens

    off = prompt_tokens(extra_body={"chat_template_kwargs": {"enable_thinking": False}})
    assert prompt_tokens() == len(engine.tokenizer.encode_chat(messages))
    assert off == len(engine.tokenizer.encode_chat(messages, enable_thinking=False))
    assert off > prompt_tokens()


def test_chat_template_kwargs_are_validated():
    base = {"model": "m", "messages": [{"role": "user", "content": "x"}]}
    chat = parse_chat_request({**base, "chat_template_kwargs": {"enable_thinking": False}},
                              model_ids=("m",), defaults=SamplingParams())
    assert chat.chat_template_kwargs == {"enable_thinking": False}
    assert parse_chat_request(base, model_ids=("m",),
                              defaults=SamplingParams()).chat_template_kwargs is None
    for bad in (["enable_thinking"], {"messages": []}):
        with pytest.raises(OpenAIError) as err:
            parse_chat_request({**base, "chat_template_kwargs": bad}, model_ids=("m",),
                               defaults=SamplingParams())
        assert err.value.param == "chat_template_kwargs" and err.value.status == 400
