"""Silero VAD for every call from one shared ONNX Runtime session.

pipecat's `SileroVADAnalyzer` builds a new `onnxruntime.InferenceSession` per analyzer, i.e. per
call: tens of milliseconds of CPU and a few MB of native memory each time, which glibc does not
hand back when the call ends. The model's recurrent state lives in numpy arrays on the
`SileroOnnxModel` wrapper, not in the session, and `InferenceSession.run` may be called from
several threads at once, so one session serves every call. Likewise pipecat gives every analyzer
its own one-thread executor: a thread per call, each woken 31 times a second; here every call's
analysis runs on one shared pool of `EXECUTOR_THREADS` threads (an analyzer's windows still run
one at a time, in order: the VAD awaits each before sending the next).

Contract: `make_vad(params) -> SileroVADAnalyzer` behaves exactly like
`SileroVADAnalyzer(params=params)` (same class, same per-call state), but the first call loads the
model once per process and later calls reuse it. `shared_session()` is that session.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from pipecat.audio.vad.silero import SileroOnnxModel, SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADAnalyzer, VADParams

_lock = threading.Lock()
_model: SileroOnnxModel | None = None
# Not CPU: each window's analysis waits for the interpreter lock before and after the ONNX run,
# and a busy event loop hands it over only every switch interval. With 2 threads the pool fell
# behind 32 callers' audio on 2 cores (user turns that never ended: browser calls stopped being
# answered after ~2 minutes); with 6 it kept up (docs/reliability.md, 32-caller probes).
EXECUTOR_THREADS = 6
_executor: ThreadPoolExecutor | None = None


def shared_executor() -> ThreadPoolExecutor:
    global _executor
    with _lock:
        if _executor is None:
            _executor = ThreadPoolExecutor(EXECUTOR_THREADS, thread_name_prefix="vad")
        return _executor


def shared_session():
    global _model
    with _lock:
        if _model is None:
            _model = SileroVADAnalyzer()._model  # pipecat finds and loads its bundled model
        return _model.session


class _SharedSileroVAD(SileroVADAnalyzer):
    def __init__(self, *, sample_rate: int | None = None, params: VADParams | None = None):
        VADAnalyzer.__init__(self, sample_rate=sample_rate, params=params)
        self._executor.shutdown(wait=False)  # the one-thread pool pipecat made for this call
        self._executor = shared_executor()
        model = SileroOnnxModel.__new__(SileroOnnxModel)
        model.session = shared_session()
        model.sample_rates = [8000, 16000]
        model.reset_states()
        self._model = model
        self._windows_since_reset = 0
        self._low_confidence_windows = 0

    async def cleanup(self) -> None:
        pass  # the executor and the ONNX session are shared: nothing of this call's to release


SharedSileroVAD = _SharedSileroVAD  # public name, for analyzers that extend it


def make_vad(params: VADParams | None = None) -> SileroVADAnalyzer:
    return _SharedSileroVAD(params=params)
