"""`WhisperSTT`: streaming faster-whisper over one *shared* model — the growing utterance is
re-transcribed on a cadence while the caller speaks, and a stable prefix is confirmed by local
agreement between consecutive passes (whisper-streaming's policy).

Per VAD segment (frame contract: voice.asr.streaming_stt) one worker runs passes in order:
- a pass is *due* when speech was heard that no pass has heard yet and either
  `min_new_audio_secs` of audio arrived since the last pass or the caller paused for
  `pause_secs` (energy below the segment's speech level; see streaming_stt.Segment), or for
  `idle_pause_secs` when this is the only call using the model (its pass costs no other call);
- interim passes of one call start at most `max_passes_per_sec` per second and never overlap
  (the next waits for the previous), except a pass due at a pause, which starts at once (the
  turn may end at that pause: its transcript must be ready then); across calls a `PassBudget`
  (one per loaded model, slots = the model's parallel workers) caps passes in flight: a due
  interim pass finding no free slot is skipped and retried later, so under load each call runs
  fewer passes;
- each pass's text goes through `LocalAgreement(n=2)`; with `prefix_confirmed` the confirmed
  words are forced as the decoder's prefix (fewer tokens to decode, no flicker of words
  already agreed). The interim transcript is confirmed + newest tail, pushed when it changed,
  and flagged `at_pause` (pushed again if need be) once the caller has paused for `pause_secs`
  after all the speech a pass heard, whether that pass ran at the pause or before it;
- at the VAD stop, if the last pass already heard all the speech (`covered >= loud_until`:
  nothing loud came after it), its text is the final transcript and no pass runs; otherwise
  one final pass over the whole segment runs at once (not held back by the per-call cap),
  waiting for a budget slot.
- A segment longer than `max_window_secs` keeps the text heard so far and continues on the
  audio after it (Whisper sees 30 s at most).
Passes run in the ASR thread pool (voice.asr.whisper_pass does the decoding); on hang-up the
worker is cancelled and a pass still in its thread finishes there with its result dropped.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pipecat.services.settings import STTSettings

from diffvoice.voice.asr.local_agreement import LocalAgreement
from diffvoice.voice.asr.pass_budget import PassBudget
from diffvoice.voice.asr.streaming_stt import Segment, StreamingSegmentSTT
from diffvoice.voice.asr.whisper_pass import PassOptions, PassResult, WhisperPassRunner

WHISPER_TTFS_P99_CPU = 1.0  # seconds, speech end -> final transcript (pipecat's turn logic)


@dataclass(frozen=True)
class StreamingOptions:
    min_new_audio_secs: float = 0.5
    pause_secs: float = 0.2
    idle_pause_secs: float | None = None  # the pause while no other call uses the model
    max_passes_per_sec: float = 2.0
    agreement_n: int = 2
    prefix_confirmed: bool = True
    max_window_secs: float = 28.0
    passes: PassOptions = field(default_factory=PassOptions)

    def __post_init__(self) -> None:
        if not 0.05 <= self.min_new_audio_secs <= 10.0:
            raise ValueError(
                f"min_new_audio_secs must be in [0.05, 10], got {self.min_new_audio_secs}"
            )
        if not 0.02 <= self.pause_secs <= 5.0:
            raise ValueError(f"pause_secs must be in [0.02, 5], got {self.pause_secs}")
        if self.idle_pause_secs is not None and not 0.02 <= self.idle_pause_secs <= self.pause_secs:
            raise ValueError(f"idle_pause_secs must be in [0.02, pause_secs={self.pause_secs}], "
                             f"got {self.idle_pause_secs}")
        if not 0.1 <= self.max_passes_per_sec <= 50.0:
            raise ValueError(
                f"max_passes_per_sec must be in [0.1, 50], got {self.max_passes_per_sec}"
            )
        if self.agreement_n < 2:
            raise ValueError(f"agreement_n must be >= 2, got {self.agreement_n}")
        if not 2.0 <= self.max_window_secs <= 29.0:
            raise ValueError(f"max_window_secs must be in [2, 29], got {self.max_window_secs}")


class WhisperSTT(StreamingSegmentSTT):
    def __init__(
        self,
        model: Any,
        *,
        model_name: str,
        budget: PassBudget | None = None,
        options: StreamingOptions | None = None,
        runner: Any = None,  # tests: anything with .run(samples, prefix) -> PassResult
        ttfs_p99_latency: float = WHISPER_TTFS_P99_CPU,
        **kwargs,
    ) -> None:
        super().__init__(
            settings=STTSettings(model=model_name, language=None),
            ttfs_p99_latency=ttfs_p99_latency,
            **kwargs,
        )
        self.options = options or StreamingOptions()
        self._runner = runner or WhisperPassRunner(model, self.options.passes)
        self.budget = budget or PassBudget(1)
        self.pass_log: list[dict] = []  # one entry per pass of this call (tests, benchmarks)
        self._joined = False  # counted in budget.calls (start .. stop / cancel / cleanup)

    async def start(self, frame):
        if not self._joined:
            self._joined = True
            self.budget.join()
        await super().start(frame)

    async def _cancel_worker(self) -> None:
        if self._joined:
            self._joined = False
            self.budget.leave()
        await super()._cancel_worker()

    def pause_samples(self, rate: int) -> float:
        """How long a quiet stretch starts a pass at once, in samples: `idle_pause_secs` while
        this is the only call using the model, else `pause_secs`."""
        opts = self.options
        alone = opts.idle_pause_secs is not None and self.budget.calls <= 1
        return (opts.idle_pause_secs if alone else opts.pause_secs) * rate

    def _pass_fn(self, samples: np.ndarray, prefix: str):
        return lambda: self._runner.run(samples, prefix or None)

    async def _pass(
        self, segment: Segment, start: int, end: int, prefix: str, *, final: bool, started: float
    ) -> PassResult | None:
        """Transcribe segment samples [start, end); None when skipped (no slot) or abandoned."""
        pcm = np.frombuffer(bytes(segment.audio[start * 2 : end * 2]), dtype=np.int16)
        samples = pcm.astype(np.float32) / 32768.0
        fn = self._pass_fn(samples, prefix)
        budget, abandoned = self.budget, self.abandoned
        result = await self._in_thread(lambda: budget.run(fn, wait=final, abandoned=abandoned))
        if result is not None:
            segment.passes += 1
            self.pass_log.append(
                {
                    "segment": segment.index,
                    "final": final,
                    "started": started,
                    "audio_secs": end / segment.sample_rate,
                    "ms": round(result.total_ms, 1),
                    "features_ms": round(result.features_ms, 1),
                    "encode_ms": round(result.encode_ms, 1),
                    "decode_ms": round(result.decode_ms, 1),
                    "text": result.text,
                }
            )
        return result

    async def _run_segment(self, segment: Segment) -> str:
        if segment.sample_rate != 16000:
            raise ValueError(f"whisper needs 16 kHz input, not {segment.sample_rate} Hz")
        opts = self.options
        rate = segment.sample_rate
        agreement = LocalAgreement(opts.agreement_n)
        frozen_text, frozen_at = "", 0  # text and end (samples) of audio beyond the window
        covered = 0  # samples heard by the last pass
        last_text: str | None = None
        last_start = -1e9
        min_gap = 1.0 / opts.max_passes_per_sec

        def joined(text: str) -> str:
            return f"{frozen_text} {text}".strip()

        while not segment.closed:
            end = segment.samples
            unheard = segment.loud_until > covered
            paused = end - segment.loud_until >= self.pause_samples(rate)
            due = unheard and (end - covered >= opts.min_new_audio_secs * rate or paused)
            wait = last_start + min_gap - time.monotonic()
            if not due:
                if paused and last_text is not None:  # the last pass heard all the speech and
                    # the caller has paused since: its text is the turn's if it ends here
                    await self._push_interim(segment, joined(last_text),
                                             joined(agreement.confirmed), at_pause=True)
                await segment.wait_changed(None)
                continue
            if wait > 0 and not paused:  # a pause is heard at once: the transcript is ready
                await segment.wait_changed(wait)  # when the turn may end there
                continue
            if end - frozen_at > opts.max_window_secs * rate and last_text is not None:
                frozen_text, frozen_at = joined(last_text), covered
                agreement.reset()
            last_start = time.monotonic()
            prefix = agreement.confirmed if opts.prefix_confirmed else ""
            result = await self._pass(
                segment, frozen_at, end, prefix, final=False, started=last_start
            )
            if result is None:  # no free slot: others are using the CPU; try again shortly
                await segment.wait_changed(min_gap)
                continue
            covered = end
            agreement.insert(result.text)
            last_text = agreement.text
            # a pass at a pause the caller has not broken yet: its text is the turn's if the
            # turn ends at this pause (drafted at once, voice.eager_drafter)
            at_pause = paused and segment.loud_until <= covered
            await self._push_interim(segment, joined(last_text), joined(agreement.confirmed),
                                     at_pause=at_pause)

        if last_text is not None and covered >= segment.loud_until:
            return joined(last_text)  # nothing was said after the last pass: reuse it
        prefix = agreement.confirmed if opts.prefix_confirmed else ""
        result = await self._pass(
            segment, frozen_at, segment.samples, prefix, final=True, started=time.monotonic()
        )
        return joined(result.text) if result is not None else ""
