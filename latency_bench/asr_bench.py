"""ASR benchmark: per-utterance final-transcript latency and WER of the streaming recognisers,
on espeak-ng receptionist questions in several voices, through the real pipecat wiring.

    python -m diffvoice.latency_bench.asr_bench --out docs/latency/asr-cpu.json \
        [--asr pocketsphinx,whisper-tiny.en] [--voices en-us:150,en-gb-x-rp:175,en-us+f3:135] \
        [--stop-secs 0.5] [--sentences docs/latency/asr-sentences.txt] [--limit N] [--merge]

Each utterance (0.3 s lead silence, speech, 1.5 s silence) is fed in real time as 20 ms frames to
[STT -> tap -> user aggregator with pipecat's Silero VAD], exactly as voice.pipeline wires them.
Per utterance it records, on the event loop's clock: the end of speech as the audio shows it
(`latency_bench.corpus.speech_bounds`), the VAD stop frame, every interim transcript and the final
one. `final_after_vad_stop_ms` is what the pipeline waits for the transcript once the VAD has
ended the segment; `final_after_speech_end_ms` adds the VAD's silence window. Whisper also logs
each pass (features / encoder / decoder ms) and whether the final reused the last pass.
WER is word-level Levenshtein over lowercase words without punctuation.

Knows nothing about the engine or TTS. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from diffvoice.latency_bench.wer import wer

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SENTENCES = REPO / "docs" / "latency" / "asr-sentences.txt"
DEFAULT_VOICES = "en-us:150,en-gb-x-rp:175,en-us+f3:135"
CHUNK = 320  # 20 ms at 16 kHz


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    return round(float(np.percentile(np.asarray(values, dtype=float), q)), 1)


async def run_utterance(
    backend, pcm: np.ndarray, speech_start_s: float, speech_end_s: float, stop_secs: float
) -> dict:
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
            vad_analyzer=vad, user_turn_strategies=_turn_strategies(False)
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
    data = pcm.tobytes()
    t0 = time.monotonic()
    speech_end_t = t0 + speech_end_s
    for k, start in enumerate(range(0, len(data), CHUNK * 2)):
        await worker.queue_frame(InputAudioRawFrame(data[start : start + CHUNK * 2], 16000, 1))
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


async def bench(args) -> dict:
    from diffvoice.latency_bench.corpus import synthesize_corpus
    from diffvoice.voice.asr.resolve import resolve_asr

    texts = args.texts
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice" / "asr"
    prompts = []
    for spec in args.voices.split(","):
        voice, rate = spec.split(":")
        for p in synthesize_corpus(texts, [voice], [int(rate)], cache, lead_silence_s=0.3):
            prompts.append((voice + ":" + rate, p))
    results = {}
    for asr in args.asr.split(","):
        backend = resolve_asr(asr, "cpu")
        if backend.warnings:
            print(f"{asr}: {backend.warnings}", file=sys.stderr)
        records = []
        for voice, prompt in prompts:
            pcm = np.concatenate([prompt.pcm, np.zeros(int(1.5 * 16000), np.int16)])
            record = await run_utterance(
                backend,
                pcm,
                float(prompt.speech_start_s),
                float(prompt.speech_end_s),
                args.stop_secs,
            )
            record.update(voice=voice, ref=prompt.text)
            records.append(record)
            print(f"{backend.name} {voice} {record['final_after_vad_stop_ms']} ms: "
                  f"{prompt.text!r} -> {record['text']!r}", file=sys.stderr)  # fmt: skip
        results[backend.name] = {"summary": summarize(records), "utterances": records}
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="docs/latency/asr-cpu.json", help="JSON report path")
    parser.add_argument("--asr", default="pocketsphinx,whisper-tiny.en", help="recognisers")
    parser.add_argument("--voices", default=DEFAULT_VOICES, help="espeak-ng voice:wpm list")
    parser.add_argument("--stop-secs", type=float, default=0.5, help="Silero VAD stop_secs")
    parser.add_argument("--sentences", default=str(DEFAULT_SENTENCES), help="one per line")
    parser.add_argument("--limit", type=int, default=0, help="first N sentences only")
    parser.add_argument("--merge", action="store_true", help="add to an existing --out report")
    args = parser.parse_args(argv)
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
        "voices": args.voices,
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
