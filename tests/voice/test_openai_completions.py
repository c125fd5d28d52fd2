"""/v1/completions, --served-model-name, `created`, API-named errors and vLLM-named /metrics.

The official `openai` client against `diffvoice serve`'s own app (cli_serve.build_app of an
--api-only AppState, so /metrics is the server's real registry) on 127.0.0.1, over a tiny
random-weight checkpoint driving a real Engine.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
import time
import urllib.request

import openai
import pytest
import uvicorn
from prometheus_client.parser import text_string_to_metric_families

from diffvoice.engine import Engine, EngineConfig, SamplingParams
from diffvoice.engine.testing import make_random_checkpoint
from diffvoice.voice import cli_serve
from diffvoice.voice.config import ServeConfig
from diffvoice.voice.openai_api.completion_request import parse_completion_request
from diffvoice.voice.openai_api.request import OpenAIError
from diffvoice.voice.state import AppState

TIMEOUT_S = 30.0 * float(os.environ.get("DIFFVOICE_TEST_TIMEOUT_SCALE", "1"))
NAMES = ("receptionist", "gpt-3.5-turbo-instruct")
PROMPT = "Bluebird Dental opens at"


class _Server:
    def __init__(self, state: AppState) -> None:
        app = cli_serve.build_app(state)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.root = f"http://127.0.0.1:{sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]},
                                        daemon=True)
        self._thread.start()
        deadline = time.monotonic() + TIMEOUT_S
        while not self._server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.root + "/v1", api_key="unused", max_retries=0,
                             timeout=TIMEOUT_S)

    def metrics(self) -> dict:
        with urllib.request.urlopen(self.root + "/metrics", timeout=TIMEOUT_S) as response:
            text = response.read().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def close(self) -> None:
        self._server.should_exit = True
        self._thread.join(TIMEOUT_S)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = make_random_checkpoint(tmp_path_factory.mktemp("completions") / "m", family="sdar")
    engine = Engine.from_pretrained(path, EngineConfig(device="cpu", enforce_eager=True,
                                                       max_running=4))
    engine.warmup()
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def server(engine):
    config = ServeConfig(model="random", api_only=True, max_new_tokens=24,
                         served_model_name=",".join(NAMES))
    server = _Server(AppState.create(config, engine))
    yield server
    server.close()


def _raw(engine: Engine, prompt: str, params: SamplingParams) -> list[str]:
    async def pieces():
        return [d.text async for d in engine.generate(prompt, params) if d.text]
    return asyncio.run(pieces())


def test_completion_is_the_raw_prompt_continued_streamed_or_not(server, engine):
    client = server.client()
    kwargs = dict(model=NAMES[0], prompt=PROMPT, max_tokens=16, temperature=1.0, seed=3,
                  extra_body={"ignore_eos": True, "steps_per_block": 2})
    before = int(time.time())
    completion = client.completions.create(**kwargs)
    assert completion.object == "text_completion" and completion.id.startswith("cmpl-")
    assert before <= completion.created <= int(time.time()) + 1  # unix seconds
    assert completion.model == NAMES[0]
    choice = completion.choices[0]
    assert choice.finish_reason == "length" and completion.usage.completion_tokens == 16
    usage = completion.usage
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    # the raw prompt, no chat template: the same text the engine gives for the bare string
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=3, ignore_eos=True,
                            steps_per_block=2)
    expected = _raw(engine, PROMPT, params)
    assert choice.text == "".join(expected)
    assert usage.prompt_tokens == len(engine.tokenizer.encode(PROMPT))

    chunks = list(client.completions.create(**kwargs, stream=True,
                                            stream_options={"include_usage": True}))
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "text_completion"
    texted = [c.choices[0].text for c in chunks if c.choices and c.choices[0].text]
    assert texted == expected  # one chunk per committed engine block
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "length" and not any(finishes[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == usage.model_dump()


def test_echo_puts_the_prompt_first(server):
    completion = server.client().completions.create(
        model=NAMES[1], prompt=[PROMPT], max_tokens=8, echo=True)
    assert completion.choices[0].text.startswith(PROMPT)
    stream = server.client().completions.create(model=NAMES[1], prompt=PROMPT, max_tokens=8,
                                                echo=True, stream=True)
    assert next(iter(stream)).choices[0].text == PROMPT


def test_served_model_names_replace_the_directory_name(server, engine):
    client = server.client()
    models = client.models.list().data
    assert [m.id for m in models] == list(NAMES)
    assert all(1_600_000_000 < m.created <= time.time() for m in models)
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model=engine.model_name, prompt=PROMPT, max_tokens=4)
    chat = client.chat.completions.create(model=NAMES[1], max_tokens=4,
                                          messages=[{"role": "user", "content": "hi"}])
    assert chat.model == NAMES[1] and chat.created <= time.time() + 1


@pytest.mark.parametrize("kwargs, param", [
    ({"max_tokens": 10**6}, None),
    ({"prompt": ["a", "b"]}, "prompt"),
    ({"prompt": ""}, "prompt"),
    ({"suffix": "!"}, "suffix"),
    ({"best_of": 3}, "best_of"),
    ({"extra_body": {"messages": []}}, "messages"),
    ({"temperature": 5}, "temperature"),
])
def test_bad_completions_get_400_naming_the_api_field(server, kwargs, param):
    request = {"model": NAMES[0], "prompt": PROMPT, "max_tokens": 4, **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(**request)
    message = caught.value.body["message"]
    assert "max_new_tokens" not in message
    if param is not None:
        assert caught.value.param == param
    else:  # the engine's own limit, reworded into the API's field name
        assert "max_tokens" in message and "max_seq_len" in message


def test_chat_max_tokens_error_names_max_tokens(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(
            model=NAMES[0], max_tokens=10**6, messages=[{"role": "user", "content": "hi"}])
    message = caught.value.body["message"]
    assert "max_tokens" in message and "max_new_tokens" not in message


def test_metrics_count_requests_in_vllm_names(server):
    before = server.metrics()
    client = server.client()
    for stream in (False, True):
        result = client.completions.create(model=NAMES[0], prompt=PROMPT, max_tokens=6,
                                           stream=stream, extra_body={"ignore_eos": True})
        if stream:
            list(result)
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=NAMES[0], prompt="", max_tokens=4)
    after = server.metrics()

    def grew(name, labels, by):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0) == by

    model = {"model_name": NAMES[0]}
    for family in ("vllm:time_to_first_token_seconds", "vllm:request_queue_time_seconds",
                   "vllm:e2e_request_latency_seconds", "vllm:time_per_output_token_seconds",
                   "diffvoice_api_output_tokens_per_second"):
        assert grew(f"{family}_count", model, 2), family
    assert grew("vllm:request_success_total", {**model, "finished_reason": "length"}, 2)
    assert grew("vllm:generation_tokens_total", model, 12)
    ok = {"handler": "/v1/completions", "method": "POST", "status": "2xx"}
    assert grew("http_requests_total", ok, 2)
    assert grew("http_requests_total", {**ok, "status": "4xx"}, 1)
    assert grew("diffvoice_api_errors_total", {"code": "invalid_value"}, 1)
    e2e = after[("vllm:e2e_request_latency_seconds_sum", (("model_name", NAMES[0]),))]
    ttft = after[("vllm:time_to_first_token_seconds_sum", (("model_name", NAMES[0]),))]
    assert e2e >= ttft > 0
    # the server cannot hear the caller's ear: no voice_to_voice histogram, real stages only
    stages = {dict(labels).get("stage") for (name, labels) in after
              if name == "diffvoice_turn_stage_seconds_count"}
    assert "voice_to_voice" not in stages and "llm_ttft" in stages


def test_parse_completion_request_directly():
    defaults = SamplingParams(max_new_tokens=24)
    req = parse_completion_request({"model": "m", "prompt": "x", "max_tokens": 5, "seed": 1,
                                    "threshold": 0.7, "stop": ["\n"]},
                                   model_ids=("m",), defaults=defaults)
    assert (req.prompt, req.params.max_new_tokens, req.params.seed) == ("x", 5, 1)
    assert req.params.policy == "threshold" and req.params.stop == ("\n",)
    assert not req.stream and not req.echo
    with pytest.raises(OpenAIError) as caught:
        parse_completion_request({"model": "m", "prompt": [1, 2]}, model_ids=("m",),
                                 defaults=defaults)
    assert caught.value.param == "prompt"
