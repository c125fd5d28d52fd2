"""One Whisper decoding pass over a PCM buffer, timed stage by stage, on a shared faster-whisper
model: log-mel features -> CTranslate2 encoder -> greedy CTranslate2 decoder.

    decoder = WhisperPassRunner(model, PassOptions())        # model: faster_whisper.WhisperModel
    result = decoder.run(samples_f32, prefix="what time")    # -> PassResult(text, timings, ...)

Why not `WhisperModel.transcribe`: it always pads the features to Whisper's 30 s window, so the
encoder costs the same ~0.6 s on this 2-core CPU for a 1 s utterance as for a 30 s one (measured,
docs/voice.md "Whisper pass profile"). CTranslate2's encoder accepts shorter inputs (whisper.cpp
calls this `audio_ctx`): encoding only the utterance plus `pad_secs` of silence, at least
`min_ctx_secs` (6 s had the best WER of 3/5/6 s and the full window, docs/voice.md), costs
about linearly less. A decoder that sees a short window tends to loop ("where are you located
where are you located"): tokens are capped by the audio length and `trim_loop` cuts a repeat
that runs to the end. `audio_ctx="full"` keeps the 30 s window.

Decoding is greedy (`beam_size=1`), without timestamps, temperature 0, no conditioning on earlier
text, capped at `max_new_tokens`; `prefix` (text the caller already said, confirmed by local
agreement) is forced as the start of the transcript so the decoder does not re-derive it.
A pass whose no-speech probability exceeds `no_speech_threshold` returns empty text. `prompt`
(e.g. voice.asr.domain_prompt for a receptionist) is given to the decoder as Whisper's previous
text (`<|startofprev|>` ... before the start of transcript, faster-whisper's `initial_prompt`),
its last MAX_PROMPT_TOKENS tokens: words the transcript should prefer when the audio is unclear.

Thread-safe as far as CTranslate2 is (`num_workers` concurrent calls); runs in the caller's thread
(never call it on the event loop). Knows nothing about pipecat or streaming.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

SAMPLE_RATE = 16000
FRAMES_PER_SEC = 100  # Whisper's log-mel hop is 10 ms
FULL_WINDOW_FRAMES = 3000  # 30 s
# a prompt's last tokens kept: Whisper's previous-text context holds up to 223; shorter decodes
# faster
MAX_PROMPT_TOKENS = 120


@dataclass(frozen=True)
class PassOptions:
    language: str | None = "en"
    audio_ctx: str = "auto"  # "auto": utterance + pad; "full": Whisper's 30 s window
    pad_secs: float = 1.0
    min_ctx_secs: float = 6.0
    max_new_tokens: int = 96
    tokens_per_sec: float = 6.0  # short windows: cap tokens by audio length (loops end early)
    no_speech_threshold: float | None = 0.6
    repetition_penalty: float = 1.0
    no_repeat_ngram_size: int = 0
    prompt: str = ""  # Whisper's previous-text prompt ("" = none)

    def __post_init__(self) -> None:
        if not isinstance(self.prompt, str):
            raise ValueError(f"prompt must be a string, got {type(self.prompt).__name__}")
        if self.audio_ctx not in ("auto", "full"):
            raise ValueError(f"audio_ctx must be 'auto' or 'full', got {self.audio_ctx!r}")
        if not 0.0 <= self.pad_secs <= 30.0:
            raise ValueError(f"pad_secs must be in [0, 30], got {self.pad_secs}")
        if not 0.0 <= self.min_ctx_secs <= 30.0:
            raise ValueError(f"min_ctx_secs must be in [0, 30], got {self.min_ctx_secs}")
        if not 1.0 <= self.tokens_per_sec <= 50.0:
            raise ValueError(f"tokens_per_sec must be in [1, 50], got {self.tokens_per_sec}")
        if not 1 <= self.max_new_tokens <= 220:
            raise ValueError(f"max_new_tokens must be in [1, 220], got {self.max_new_tokens}")
        if self.no_speech_threshold is not None and not 0.0 <= self.no_speech_threshold <= 1.0:
            raise ValueError(
                f"no_speech_threshold must be in [0, 1] or None, got {self.no_speech_threshold}"
            )


@dataclass(frozen=True)
class PassResult:
    text: str
    audio_samples: int  # how much of the utterance this pass heard
    no_speech_prob: float
    features_ms: float
    encode_ms: float
    decode_ms: float
    encoder_frames: int
    new_tokens: int = 0  # text tokens the decoder produced after the forced prefix

    @property
    def total_ms(self) -> float:
        return self.features_ms + self.encode_ms + self.decode_ms


def trim_loop(text: str, min_period: int = 2, min_tail: int = 3) -> str:
    """Cut a decoder loop: where a span of >= `min_period` words is followed, up to the end of
    the text, by copies of itself (the last may be cut short; at least min(period, min_tail)
    words of them), keep one copy ("a b c a b c a b" -> "a b c"). Legitimate speech rarely
    ends that way; a Whisper decoder given a short window often does."""
    original = text.split()
    words = [w.strip(".,!?;:\"'").lower() for w in original[:160]]
    for start in range(len(words)):
        for period in range(min_period, len(words) - start):
            span = words[start : start + period]
            tail = words[start + period :]
            if (
                len(tail) >= min(period, 3)
                and tail == (span * (len(tail) // period + 1))[: len(tail)]
            ):
                return " ".join(original[: start + period])
    return text


def _max_length(tokens: int) -> int:
    """CTranslate2's `max_length` for `tokens` output tokens (forced prefix + new). Measured with
    CTranslate2 4.x on Whisper tiny.en: `generate` returns max_length // 2 tokens whatever the
    prompt's length (max_length 60 -> 30 tokens, with or without a 3-token prefix), not
    max_length - len(prompt); the earlier len(prompt) + budget cut long utterances at about
    half the budget (tests/voice/asr/test_whisper_pass.py). 448: Whisper's text context."""
    return min(448, 2 * tokens + 1)


class WhisperPassRunner:
    def __init__(self, model: Any, options: PassOptions | None = None) -> None:
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_suppressed_tokens

        self.model = model
        self.options = options or PassOptions()
        multilingual = bool(model.model.is_multilingual)
        language = self.options.language if multilingual else "en"
        self._tokenizer = Tokenizer(
            model.hf_tokenizer, multilingual, task="transcribe", language=language or "en"
        )
        context: list[int] = []
        if self.options.prompt.strip():
            words = self._tokenizer.encode(" " + self.options.prompt.strip())
            context = [self._tokenizer.sot_prev, *words[-MAX_PROMPT_TOKENS:]]
        self._context = len(context)  # prompt tokens before the start of transcript
        self._prompt = [*context, *self._tokenizer.sot_sequence, self._tokenizer.no_timestamps]
        self._suppress = list(get_suppressed_tokens(self._tokenizer, [-1]) or [])

    def _encoder_frames(self, audio_frames: int) -> int:
        if self.options.audio_ctx == "full":
            return FULL_WINDOW_FRAMES
        want = audio_frames + int(self.options.pad_secs * FRAMES_PER_SEC)
        want = max(want, int(self.options.min_ctx_secs * FRAMES_PER_SEC))
        want = -(-want // 100) * 100  # whole seconds: fewer distinct shapes, same cost class
        return min(FULL_WINDOW_FRAMES, want)

    def run(self, samples: np.ndarray, prefix: str | None = None) -> PassResult:
        """samples: float32 mono 16 kHz in [-1, 1]; the last 30 s are used if longer."""
        from faster_whisper.transcribe import get_ctranslate2_storage

        samples = np.asarray(samples, dtype=np.float32)[-FULL_WINDOW_FRAMES * 160 :]
        t0 = time.perf_counter()
        features = self.model.feature_extractor(samples)  # [n_mels, frames + 1]
        audio_frames = features.shape[-1] - 1
        n = self._encoder_frames(audio_frames)
        if features.shape[-1] >= n:
            features = features[:, :n]
        else:
            features = np.pad(features, ((0, 0), (0, n - features.shape[-1])))
        # [1, n_mels, n] contiguous, as CTranslate2 wants it
        features = np.ascontiguousarray(features[None], dtype=np.float32)
        t1 = time.perf_counter()
        encoded = self.model.model.encode(get_ctranslate2_storage(features), to_cpu=False)
        t2 = time.perf_counter()
        prompt = list(self._prompt)
        prefix_tokens: list[int] = []
        if prefix and prefix.strip():
            prefix_tokens = self._tokenizer.encode(" " + prefix.strip())[:100]
            prompt.extend(prefix_tokens)
        budget = self.options.max_new_tokens
        if self.options.audio_ctx == "auto":
            budget = min(budget, 4 + int(self.options.tokens_per_sec * audio_frames / 100))
        result = self.model.model.generate(
            encoded,
            [prompt],
            beam_size=1,
            max_length=_max_length(self._context + len(prefix_tokens) + budget),
            return_scores=False,
            return_no_speech_prob=True,
            suppress_blank=not prefix_tokens,
            suppress_tokens=self._suppress,
            repetition_penalty=self.options.repetition_penalty,
            no_repeat_ngram_size=self.options.no_repeat_ngram_size,
        )[0]
        t3 = time.perf_counter()
        generated = result.sequences_ids[0]
        tokens = [t for t in generated if t < self._tokenizer.eot]
        new_tokens = len(generated)
        if prefix_tokens and tokens[: len(prefix_tokens)] == prefix_tokens:
            new_tokens -= len(prefix_tokens)  # the result repeats the forced prefix
        elif prefix_tokens:
            tokens = prefix_tokens + tokens  # the result holds only the generated part
        if new_tokens > budget:  # should CTranslate2 ever count max_length as documented
            tokens = tokens[: len(tokens) - (new_tokens - budget)]
            new_tokens = budget
        text = self._tokenizer.decode(tokens).strip()
        if self.options.audio_ctx == "auto":
            hit_budget = new_tokens >= budget  # stopped by the cap, not by end of text
            text = trim_loop(text, min_tail=2 if hit_budget else 3)
        threshold = self.options.no_speech_threshold
        if threshold is not None and result.no_speech_prob > threshold and not prefix_tokens:
            text = ""
        return PassResult(
            text=text,
            audio_samples=len(samples),
            no_speech_prob=float(result.no_speech_prob),
            features_ms=(t1 - t0) * 1000.0,
            encode_ms=(t2 - t1) * 1000.0,
            decode_ms=(t3 - t2) * 1000.0,
            encoder_frames=n,
            new_tokens=new_tokens,
        )
