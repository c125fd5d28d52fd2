"""ASR benchmark: per-utterance final-transcript latency and WER of the streaming recognisers,
on spoken receptionist sentences in several voices, through the real pipecat wiring, as the
browser (16 kHz) or a phone line (8 kHz mu-law) delivers them.

    python -m diffvoice.latency_bench.asr_bench --out docs/latency/asr-cpu.json \
        [--asr pocketsphinx,whisper-tiny.en] [--voices en-us:150,en-gb-x-rp:175,en-us+f3:135] \
        [--stop-secs 0.5] [--sentences docs/latency/asr-sentences.txt] [--limit N] [--merge]
        [--corpus sentences|turns] [--kokoro-voices jm_kumo,jf_gongitsune]
        [--kokoro-speeds 1.0,1.15] [--per-speaker N --seed S] [--rates 16000,8000]
        [--cache DIR] [--note TEXT]

Each utterance (0.3 s lead silence, speech, 1.5 s silence) is fed in real time as 20 ms frames to
[STT -> tap -> user aggregator with pipecat's Silero VAD], exactly as voice.pipeline wires them.
Per utterance it records, on the event loop's clock: the end of speech as the audio shows it
(`latency_bench.corpus.speech_bounds`), the VAD stop frame, every interim transcript and the final
one. `final_after_vad_stop_ms` is what the pipeline waits for the transcript once the VAD has
ended the segment; `final_after_speech_end_ms` adds the VAD's silence window. Whisper also logs
each pass (features / encoder / decoder ms) and whether the final reused the last pass.
WER is word-level Levenshtein over lowercase words without punctuation (latency_bench.wer).

What is spoken: `--corpus sentences` (default) reads `--sentences` and speaks them with the
espeak-ng `--voices` (voice:wpm list). `--corpus turns` takes the turn-taking corpus's one-breath
texts (latency_bench.corpus: RECEPTIONIST_PROMPTS and every line of SLOT_DIALOGUES, the slot
answers included; the paused prompts are left out) spoken by the espeak-ng development voices x
speeds (corpus.DEFAULT_VOICES x DEFAULT_SPEEDS, unless `--voices` is given) and the
`--kokoro-voices` x `--kokoro-speeds` (the hold-out voices, latency_bench.speakers.Synth).
`--per-speaker N` keeps N texts per speaker, drawn with `random.Random(f"{seed}:{tag}")` so the
subset is fixed by `--seed`. WAVs are cached under `--cache` (same keys as the voice bench's
corpus cache, so pointing it there reuses its files).

`--rates 16000,8000`: every utterance is heard at each rate, one after the other. 16000 is the
browser path (the 16 kHz prompt as is). 8000 is the phone path (latency_bench.phone_path): the
prompt as the load generator's Twilio caller sends it (latency_bench.twilio_client: soxr down to 8
kHz, voice.telephony.mulaw.encode per 20 ms frame, as base64 Media Streams `media` messages),
decoded by the server's own voice.telephony.media_stream.CallSerializer (mu-law by table, then
pipecat's soxr stream resampler up to 16 kHz, no ingest limit); what each 20 ms message releases is
fed at that message's time, as the server's pipeline gets it (`phone_ticks`: ~95 ms blocks every
4-5 messages with pipecat's default "VHQ"; none with the server's "QQ"). `8000/VHQ` runs the phone
path with another soxr quality. Speech bounds stay those of the 16 kHz prompt, so the phone path's
latency includes the resampler's hold-back (17-110 ms with "VHQ"). Reports are keyed `<asr>` with
one rate and `<asr>@<rate>` with several; each summary has `per_voice` (utterances, reference
words, edits, corpus WER, split: "development" for espeak-ng, "hold-out" for Kokoro).

Knows nothing about the engine or TTS. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from diffvoice.latency_bench.phone_path import phone_ticks
from diffvoice.latency_bench.wer import wer, word_edits

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SENTENCES = REPO / "docs" / "latency" / "asr-sentences.txt"
DEFAULT_VOICES_SENTENCES = "en-us:150,en-gb-x-rp:175,en-us+f3:135"
CHUNK = 320  # 20 ms at 16 kHz


def turn_texts() -> list[str]:
    """The turn-taking corpus's one-breath texts: its questions, then every line of its slot
    dialogues (requests and the one- or two-word answers), each once."""
    from diffvoice.latency_bench.corpus import RECEPTIONIST_PROMPTS, SLOT_DIALOGUES

    texts = list(RECEPTIONIST_PROMPTS) + [line for d in SLOT_DIALOGUES for line in d]
    return list(dict.fromkeys(texts))


def pick_texts(texts: list[str], tag: str, per_speaker: int, seed: int) -> list[str]:
    """`per_speaker` of `texts` for the speaker tagged `tag` (all when 0 or more than there
    are), in corpus order; the draw depends only on (seed, tag)."""
    if not per_speaker or per_speaker >= len(texts):
        return list(texts)
    chosen = set(random.Random(f"{seed}:{tag}").sample(range(len(texts)), per_speaker))
    return [t for i, t in enumerate(texts) if i in chosen]


def split_of(speaker) -> str:
    """"development" for espeak-ng speakers, "hold-out" for Kokoro ones (module docstring)."""
    return "development" if speaker.engine == "espeak" else "hold-out"


def _rate_spec(spec: str) -> tuple[str, int, str | None]:
    """"16000", "8000" or "8000/VHQ" (the phone path with that soxr quality instead of the
    server's, voice.telephony.media_stream.INPUT_RESAMPLER_QUALITY) -> (spec, Hz, quality)."""
    rate, _, quality = spec.strip().partition("/")
    if rate not in ("16000", "8000") or (quality and rate != "8000"):
        raise ValueError(f"rate must be 16000, 8000 or 8000/QUALITY, got {spec!r}")
    return spec.strip(), int(rate), quality or None


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 1)


async def run_utterance(
    backend,
    pcm: np.ndarray,
    speech_start_s: float,
    speech_end_s: float,
    stop_secs: float,
    ticks: list[np.ndarray] | None = None,
) -> dict:
    """`pcm` fed as 20 ms frames in real time; or, with `ticks`, one entry every 20 ms, each
    queued as one frame when not empty (the phone path's bursts, `phone_ticks`)."""
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADParams
    from pipecat.frames.frames import (
        InputAudioRawFrame,
        InterimTranscriptionFrame,
        TranscriptionFrame,
        VADUserStoppedSpeakingFrame,
    )
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.workers.runner import WorkerRunner

    from diffvoice.voice.frame_tap import FrameTap
    from diffvoice.voice.pipeline import _turn_strategies

    events: list[tuple[float, str, str]] = []

    async def tap(_name, frame, _direction) -> None:
        now = time.monotonic()
        if isinstance(frame, TranscriptionFrame):
            events.append((now, "final", frame.text))
        elif isinstance(frame, InterimTranscriptionFrame):
            events.append((now, "interim", frame.text))
        elif isinstance(frame, VADUserStoppedSpeakingFrame):
            events.append((now, "vad_stop", ""))

    stt = backend.make_service()
    vad = SileroVADAnalyzer(params=VADParams(stop_secs=stop_secs))
    aggregators = LLMContextAggregatorPair(
        LLMContext(messages=[]),
        user_params=LLMUserAggregatorParams(
            vad_analyzer=vad, user_turn_strategies=_turn_strategies()
        ),
    )
    worker = PipelineWorker(
        Pipeline([stt, FrameTap("stt", tap), aggregators.user()]),
        params=PipelineParams(audio_in_sample_rate=16000),
        cancel_on_idle_timeout=False,
        enable_rtvi=False,
    )
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_w, _f):
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    run = asyncio.create_task(runner.run())
    await asyncio.wait_for(started.wait(), 30)
    if ticks is None:
        data = pcm.tobytes()
        ticks = [data[start : start + CHUNK * 2] for start in range(0, len(data), CHUNK * 2)]
    else:
        ticks = [t.tobytes() for t in ticks]
    t0 = time.monotonic()
    speech_end_t = t0 + speech_end_s
    for k, chunk in enumerate(ticks):
        if chunk:
            await worker.queue_frame(InputAudioRawFrame(chunk, 16000, 1))
        await asyncio.sleep(max(0.0, t0 + (k + 1) * CHUNK / 16000 - time.monotonic()))
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:  # the last VAD stop must have its final (or none)
        stops = [t for t, kind, _ in events if kind == "vad_stop"]
        finals = [t for t, kind, _ in events if kind == "final"]
        if stops and finals and finals[-1] >= stops[-1]:
            break
        await asyncio.sleep(0.02)
    await worker.cancel()
    await asyncio.wait_for(run, 30)
    stops = [t for t, kind, _ in events if kind == "vad_stop"]
    finals = [(t, text) for t, kind, text in events if kind == "final"]
    interims = [t for t, kind, _ in events if kind == "interim"]
    last_final = finals[-1][0] if finals else None
    record = {
        "text": " ".join(text for _, text in finals),
        "segments": len(stops),
        "interims": len(interims),
        "first_interim_after_speech_start_ms": (
            round((interims[0] - t0 - speech_start_s) * 1000, 1) if interims else None
        ),
        "final_after_vad_stop_ms": (
            round((last_final - stops[-1]) * 1000, 1) if stops and last_final else None
        ),
        "final_after_speech_end_ms": (
            round((last_final - speech_end_t) * 1000, 1) if last_final else None
        ),
        "interims_before_speech_end": sum(t < speech_end_t for t in interims),
    }
    log = getattr(stt, "pass_log", None)
    if log is not None:
        record["passes"] = len(log)
        record["final_pass"] = any(p["final"] for p in log)
        record["pass_ms"] = [p["ms"] for p in log]
        record["stage_ms"] = {
            k: round(sum(p[f"{k}_ms"] for p in log), 1) for k in ("features", "encode", "decode")
        }
    return record


def per_voice(records: list[dict]) -> dict:
    """Per voice (all its speeds together): utterances, reference words, word edits, corpus
    WER (edits / words) and its split, in first-seen order."""
    out: dict[str, dict] = {}
    for r in records:
        edits, words = word_edits(r["ref"], r["text"])
        v = out.setdefault(r["voice"], {"split": r.get("split"), "n": 0, "words": 0, "edits": 0})
        v["n"] += 1
        v["words"] += words
        v["edits"] += edits
    for v in out.values():
        v["wer"] = round(v["edits"] / v["words"], 4) if v["words"] else None
    return out


def summarize(records: list[dict]) -> dict:
    after_stop = [r["final_after_vad_stop_ms"] for r in records if r["final_after_vad_stop_ms"]]
    after_end = [r["final_after_speech_end_ms"] for r in records if r["final_after_speech_end_ms"]]
    out = {
        "utterances": len(records),
        "wer": round(wer([(r["ref"], r["text"]) for r in records]), 4),
        "wer_per_voice": {
            voice: round(wer([(r["ref"], r["text"]) for r in records if r["voice"] == voice]), 4)
            for voice in sorted({r["voice"] for r in records})
        },
        "per_voice": per_voice(records),
        "final_after_vad_stop_ms": {q: _pct(after_stop, v) for q, v in (("p50", 50), ("p90", 90))},
        "final_after_speech_end_ms": {q: _pct(after_end, v) for q, v in (("p50", 50), ("p90", 90))},
        "no_final": sum(1 for r in records if not r["text"]),
        "with_interim_before_speech_end": sum(r["interims_before_speech_end"] > 0 for r in records),
        "multi_segment": sum(r["segments"] > 1 for r in records),
    }
    out["final_after_vad_stop_ms"]["p99"] = _pct(after_stop, 99)
    if records and "passes" in records[0]:
        passes = [p for r in records for p in r["pass_ms"]]
        out["passes_per_utterance_mean"] = round(statistics.mean(r["passes"] for r in records), 2)
        out["final_pass_rate"] = round(sum(r["final_pass"] for r in records) / len(records), 3)
        out["pass_ms"] = {"p50": _pct(passes, 50), "p90": _pct(passes, 90)}
        total = {
            k: sum(r["stage_ms"][k] for r in records) for k in ("features", "encode", "decode")
        }
        grand = sum(total.values()) or 1.0
        out["stage_share"] = {k: round(v / grand, 3) for k, v in total.items()}
    return out


def speakers_and_texts(args) -> list[tuple[object, list[str]]]:
    """(Speaker, its texts) pairs for the chosen corpus (module docstring)."""
    from diffvoice.latency_bench.corpus import DEFAULT_SPEEDS, DEFAULT_VOICES
    from diffvoice.latency_bench.speakers import Speaker, kokoro_speakers

    if args.corpus == "turns":
        texts = turn_texts()
        voices = args.voices or ",".join(f"{v}:{s}" for v in DEFAULT_VOICES for s in DEFAULT_SPEEDS)
    else:
        texts = args.texts
        voices = args.voices or DEFAULT_VOICES_SENTENCES
    speakers = [
        Speaker("espeak", v, int(r)) for v, r in (spec.split(":") for spec in voices.split(","))
    ]
    if args.kokoro_voices:
        speakers += kokoro_speakers(
            args.kokoro_voices.split(","), [float(x) for x in args.kokoro_speeds.split(",")]
        )
    return [(sp, pick_texts(texts, sp.tag, args.per_speaker, args.seed)) for sp in speakers]


async def bench(args) -> dict:
    from diffvoice.latency_bench.corpus import spoken_prompts
    from diffvoice.latency_bench.speakers import Synth
    from diffvoice.voice.asr.resolve import resolve_asr

    cache = args.cache_dir
    synth = Synth()
    prompts = []
    for speaker, texts in speakers_and_texts(args):
        for p in spoken_prompts(texts, [speaker], cache, lead_silence_s=0.3, synth=synth):
            prompts.append((speaker, p))
    paths = [_rate_spec(spec) for spec in args.rates.split(",")]
    rates = [spec for spec, _, _ in paths]
    tail = np.zeros(int(1.5 * 16000), np.int16)
    results = {}
    for asr in args.asr.split(","):
        backend = resolve_asr(asr, "cpu")
        if backend.warnings:
            print(f"{asr}: {backend.warnings}", file=sys.stderr)
        records: dict[str, list[dict]] = {rate: [] for rate in rates}
        for speaker, prompt in prompts:
            heard = np.concatenate([prompt.pcm, tail])
            for rate, hz, quality in paths:  # the same utterance each way, back to back
                ticks = None if hz == 16000 else await phone_ticks(heard, quality)
                record = await run_utterance(
                    backend,
                    heard,
                    float(prompt.speech_start_s),
                    float(prompt.speech_end_s),
                    args.stop_secs,
                    ticks=ticks,
                )
                record.update(
                    voice=speaker.label
                    if args.corpus == "turns"
                    else f"{speaker.voice}:{int(speaker.speed)}",
                    speaker=speaker.tag,
                    engine=speaker.engine,
                    split=split_of(speaker),
                    rate=hz,
                    ref=prompt.text,
                )
                records[rate].append(record)
                print(
                    f"{backend.name} {rate} {speaker.tag} {record['final_after_vad_stop_ms']} "
                    f"ms: {prompt.text!r} -> {record['text']!r}",
                    file=sys.stderr,
                )
        for rate, hz, quality in paths:
            key = backend.name if rates == ["16000"] else f"{backend.name}@{rate}"
            results[key] = {
                "rate": hz,
                **({"resampler_quality": quality} if quality else {}),
                "summary": summarize(records[rate]),
                "utterances": records[rate],
            }
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/latency/asr-cpu.json", help="JSON report path")
    parser.add_argument("--asr", default="pocketsphinx,whisper-tiny.en", help="recognisers")
    parser.add_argument(
        "--voices",
        default=None,
        help="espeak-ng voice:wpm list (default: "
        f"{DEFAULT_VOICES_SENTENCES}; --corpus turns: its voices x speeds)",
    )
    parser.add_argument("--stop-secs", type=float, default=0.5, help="Silero VAD stop_secs")
    parser.add_argument("--sentences", default=str(DEFAULT_SENTENCES), help="one per line")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    parser.add_argument("--merge", action="store_true", help="add to an existing --out report")
    parser.add_argument(
        "--corpus",
        choices=("sentences", "turns"),
        default="sentences",
        help="--sentences file, or the turn-taking corpus's one-breath texts",
    )
    parser.add_argument("--kokoro-voices", default="", help="Kokoro voices (hold-out) to add")
    parser.add_argument("--kokoro-speeds", default="1.0,1.15", help="Kokoro speed multipliers")
    parser.add_argument(
        "--per-speaker",
        type=int,
        default=0,
        help="N texts per speaker, a fixed draw per --seed (0: all)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the --per-speaker draw")
    parser.add_argument(
        "--rates", default="16000",
        help="16000 (browser) and/or 8000 (Twilio mu-law phone path; 8000/VHQ: with that "
        "soxr quality)",
    )
    parser.add_argument("--cache", default="", help="WAV cache (default ~/.cache/diffvoice/asr)")
    parser.add_argument("--note", action="append", default=[], help="a note for the report")
    args = parser.parse_args(argv)
    try:
        [_rate_spec(spec) for spec in args.rates.split(",")]
    except ValueError as e:
        parser.error(str(e))
    args.cache_dir = (
        Path(args.cache).expanduser()
        if args.cache
        else (Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice" / "asr")
    )
    args.texts = [t.strip() for t in Path(args.sentences).read_text().splitlines() if t.strip()]
    args.texts = args.texts[: args.limit] if args.limit else args.texts
    from loguru import logger

    logger.remove()
    logger.add(sys.stderr, level="WARNING")
    started = time.time()
    load_before = os.getloadavg()
    results = asyncio.run(bench(args))
    run = {
        "command": "python -m diffvoice.latency_bench.asr_bench " + " ".join(argv or sys.argv[1:]),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform()},
        "load_avg_before": load_before,
        "load_avg_after": os.getloadavg(),
        "stop_secs": args.stop_secs,
        "corpus": args.corpus,
        "voices": args.voices,
        "kokoro_voices": args.kokoro_voices,
        "kokoro_speeds": args.kokoro_speeds if args.kokoro_voices else None,
        "per_speaker": args.per_speaker,
        "seed": args.seed,
        "rates": args.rates,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "notes": args.note,
        "asr": list(results),
        "wall_s": round(time.time() - started, 1),
    }
    out = Path(args.out)
    report = {"runs": [], "results": {}}
    if args.merge and out.is_file():  # one report for recognisers measured in separate runs
        report = json.loads(out.read_text())
    report["runs"].append(run)
    report["results"].update(results)
    out.write_text(json.dumps(report, indent=1) + "\n")
    for name, r in results.items():
        print(name, json.dumps(r["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
