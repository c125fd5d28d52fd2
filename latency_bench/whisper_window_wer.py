"""WER of one Whisper pass per utterance with the full 30 s encoder window vs shorter windows
(voice.asr.whisper_pass `audio_ctx="auto"`), on the ASR benchmark's espeak-ng corpus.

    python -m diffvoice.latency_bench.whisper_window_wer [--model whisper-tiny.en] \
        [--voices en-us:150,en-gb-x-rp:175,en-us+f3:135,en-gb-scotland+m3:190] [--setups ...]

Each utterance gets 0.25 s of silence before and 0.5 s after; the WER is word-level over
lowercase words without punctuation (latency_bench.asr_bench.wer). Prints one line per setup.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

from diffvoice.latency_bench.asr_bench import DEFAULT_SENTENCES, wer

SETUPS = {
    "full-30s": {"audio_ctx": "full"},
    "auto-min3s": {"min_ctx_secs": 3.0},
    "auto-min5s-pad2s": {"min_ctx_secs": 5.0, "pad_secs": 2.0},
    "auto-min6s": {"min_ctx_secs": 6.0},
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="whisper-tiny.en", help="packaged name or CT2 dir")
    parser.add_argument(
        "--voices", default="en-us:150,en-gb-x-rp:175,en-us+f3:135,en-gb-scotland+m3:190"
    )
    parser.add_argument(
        "--setups", default=",".join(SETUPS), help="comma list of " + ", ".join(SETUPS)
    )
    args = parser.parse_args(argv)
    from faster_whisper import WhisperModel

    from diffvoice.latency_bench.corpus import synthesize_corpus
    from diffvoice.voice.asr.packaged_models import packaged_whisper_dir
    from diffvoice.voice.asr.whisper_pass import PassOptions, WhisperPassRunner

    texts = [t for t in DEFAULT_SENTENCES.read_text().splitlines() if t.strip()]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice" / "asr"
    prompts = []
    for spec in args.voices.split(","):
        voice, rate = spec.split(":")
        prompts += synthesize_corpus(texts, [voice], [int(rate)], cache, lead_silence_s=0.25)
    path = packaged_whisper_dir(args.model) or Path(args.model)
    model = WhisperModel(str(path), device="cpu", compute_type="int8", cpu_threads=2)
    for name in args.setups.split(","):
        options = SETUPS[name]
        runner = WhisperPassRunner(model, PassOptions(**options))
        pairs, ms = [], []
        for p in prompts:
            audio = np.concatenate([p.pcm, np.zeros(8000, np.int16)]).astype(np.float32) / 32768
            result = runner.run(audio)
            pairs.append((p.text, result.text))
            ms.append(result.total_ms)
        print(f"{name}: WER {wer(pairs):.3f} over {len(pairs)} utterances, "
              f"pass p50 {np.median(ms):.0f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
