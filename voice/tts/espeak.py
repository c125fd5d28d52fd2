"""espeak-ng through ctypes, using the library and voice data bundled in `espeakng-loader`
(no apt package needed).

Contract: `Espeak.shared()` returns the one process-wide synthesizer (libespeak-ng keeps global
state, so every call is serialised by a lock); `synthesize(text, voice, rate_wpm, cancelled)`
returns int16 mono PCM bytes at `Espeak.sample_rate` (22050 Hz). It blocks for a few
milliseconds per sentence, so async callers run it in a thread; `cancelled()` is polled from the
audio callback and aborts synthesis early.

Knows nothing about pipecat or asyncio.
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable

AUDIO_OUTPUT_SYNCHRONOUS = 2
ESPEAK_CHARS_UTF8 = 1
POS_CHARACTER = 1
ESPEAK_RATE = 1  # espeak_PARAMETER espeakRATE (words per minute)
BUFFER_MS = 100  # audio handed to the callback per call

_SynthCallback = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p
)


class EspeakError(RuntimeError):
    pass


class Espeak:
    _instance: Espeak | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        import espeakng_loader

        self._lib = ctypes.CDLL(espeakng_loader.get_library_path())
        lib = self._lib
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_SetSynthCallback.argtypes = [_SynthCallback]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        rate = lib.espeak_Initialize(
            AUDIO_OUTPUT_SYNCHRONOUS, BUFFER_MS, espeakng_loader.get_data_path().encode(), 0
        )
        if rate <= 0:
            raise EspeakError(f"espeak_Initialize failed ({rate})")
        self.sample_rate: int = rate
        self._lock = threading.Lock()
        self._chunks: list[bytes] = []
        self._cancelled: Callable[[], bool] = lambda: False
        self._callback = _SynthCallback(self._on_audio)  # keep a reference: C holds the pointer
        lib.espeak_SetSynthCallback(self._callback)
        self._voice: str | None = None
        self._rate: int | None = None

    @classmethod
    def shared(cls) -> Espeak:
        with cls._instance_lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _on_audio(self, wav, num_samples: int, _events) -> int:
        if wav and num_samples > 0:
            self._chunks.append(ctypes.string_at(wav, num_samples * 2))
        return 1 if self._cancelled() else 0  # non-zero aborts synthesis

    def synthesize(
        self,
        text: str,
        voice: str = "en-us",
        rate_wpm: int = 175,
        cancelled: Callable[[], bool] | None = None,
    ) -> bytes:
        """int16 mono PCM at self.sample_rate for `text` (b"" if cancelled before any audio)."""
        data = text.encode("utf-8")
        with self._lock:
            if voice != self._voice:
                err = self._lib.espeak_SetVoiceByName(voice.encode())
                if err != 0:
                    raise EspeakError(f"espeak-ng has no voice {voice!r} (error {err})")
                self._voice = voice
            if rate_wpm != self._rate:
                self._lib.espeak_SetParameter(ESPEAK_RATE, int(rate_wpm), 0)
                self._rate = rate_wpm
            self._chunks = []
            self._cancelled = cancelled or (lambda: False)
            try:
                err = self._lib.espeak_Synth(
                    data, len(data) + 1, 0, POS_CHARACTER, 0, ESPEAK_CHARS_UTF8, None, None
                )
                self._lib.espeak_Synchronize()
                if err != 0:
                    raise EspeakError(f"espeak_Synth failed (error {err})")
                return b"".join(self._chunks)
            finally:
                self._chunks = []
                self._cancelled = lambda: False
