"""`PocketsphinxSTT`: streaming pocketsphinx (bundled en-us acoustic model, CPU, offline) with
native partial hypotheses.

Per VAD segment (see voice.asr.streaming_stt for the frame contract): a decoder from the shared
`DecoderPool` starts an utterance, every chunk of new audio is fed with
`process_raw(chunk, full_utt=False)` and `hyp()` gives the partial hypothesis, pushed as an
interim transcript when it changed; at the VAD stop the rest of the segment (which already ends
in the VAD's stop_secs of silence; `trailing_silence_secs` adds more) is fed, `end_utt()` and the
final hypothesis becomes the TranscriptionFrame. Feeding batches whatever
audio arrived while the previous feed ran, so a slow machine decodes in larger steps instead of
falling behind.

`DecoderPool`: pocketsphinx decoders are not thread-safe, and one takes 0.4-0.9 s to build
(~40 MB each with the domain LM) *holding the interpreter lock*: every build freezes the event
loop, and so every call in the process, for that long. A call that finds no free decoder builds
one (up to `max_total` in use at once, beyond which `acquire` waits up to
`acquire_timeout_secs`). Returned decoders are kept: up to `max_idle` for good, the ones beyond
that until they have been idle `idle_secs` (the most recently returned one is reused first, so
the surplus ages out). So a burst's decoders serve the next burst instead of being rebuilt
(the 32-caller soak rebuilt one every ~20 s when the surplus was discarded at once), and memory
still shrinks back after a quiet spell (issue 12: the old pool only grew).

A segment that finds every decoder busy first waits up to `build_wait_secs` (default 1 s)
for one to come back (`try_acquire`, polled from the event loop: no thread waits) and only then
builds one. Its audio is buffered meanwhile and fed in a burst when a decoder is free, so
the wait delays its transcript by at most that long, where a build would freeze every call in
the process for 0.4-0.9 s (a 2-worker 32-caller soak built 3 decoders mid-call in 10 minutes;
event-loop stalls of 0.74-1.27 s came with them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from pipecat.services.settings import STTSettings

from diffvoice.voice.asr.streaming_stt import ASR_EXECUTOR, Segment, StreamingSegmentSTT

POCKETSPHINX_TTFS_P99_CPU = 1.0
# 40 ms of 16 kHz int16 per process_raw call: the decoder holds the GIL for the whole call
# (measured: 200 ms batches up to ~200 ms, 20 ms ones ~1 ms p50 / ~25 ms max), and between calls
# the event loop gets the GIL back
FEED_BYTES = 1280
DECODER_POLL_SECS = 0.02  # a segment waiting for a busy decoder checks this often


class DecoderPool:
    """Thread-safe bounded pool of pocketsphinx Decoders (16 kHz, bundled en-us model)."""

    def __init__(
        self,
        size: int = 1,
        *,
        max_idle: int = 4,
        max_total: int = 32,
        acquire_timeout_secs: float = 30.0,
        idle_secs: float = 120.0,
        build_wait_secs: float = 1.0,
        clock=time.monotonic,
        **decoder_kwargs: Any,
    ) -> None:
        if not 0 <= size <= max_idle:
            raise ValueError(f"size must be in [0, max_idle={max_idle}], got {size}")
        if not 1 <= max_idle <= max_total:
            raise ValueError(f"max_idle must be in [1, max_total={max_total}], got {max_idle}")
        self.max_idle = max_idle
        self.max_total = max_total
        self.acquire_timeout_secs = acquire_timeout_secs
        self.idle_secs = idle_secs
        if not build_wait_secs >= 0:
            raise ValueError(f"build_wait_secs must be >= 0, got {build_wait_secs}")
        self.build_wait_secs = build_wait_secs
        self.waited = 0  # acquisitions that waited for a busy decoder instead of building
        self._clock = clock
        self._kwargs = {"samprate": 16000, "loglevel": "FATAL", **decoder_kwargs}
        self._cond = threading.Condition()
        # idle decoders with the time each came back, oldest first
        self._free: list[tuple[Any, float]] = [(self._new(), clock()) for _ in range(size)]
        self.total = size  # built and not discarded (idle + in use)
        self.created = size
        self.discarded = 0

    def _new(self):
        from pocketsphinx import Decoder

        return Decoder(**self._kwargs)

    def prewarm(self, n: int | None = None) -> int:
        """Build idle decoders until `n` (default max_idle) are idle; -> how many were built.
        A build holds the interpreter lock 0.4-0.9 s: done at start-up, not during a call."""
        n = self.max_idle if n is None else min(n, self.max_idle)
        built = 0
        while True:
            with self._cond:
                if len(self._free) >= n or self.total >= self.max_total:
                    return built
                self.total += 1
                self.created += 1
            try:
                decoder = self._new()
            except Exception:
                with self._cond:
                    self.total -= 1
                raise
            with self._cond:
                self._free.append((decoder, self._clock()))
                self._cond.notify()
            built += 1

    @property
    def idle(self) -> int:
        with self._cond:
            return len(self._free)

    def try_acquire(self, *, after_wait: bool = False):
        """An idle decoder, or None when every decoder is busy (never builds, never waits);
        `after_wait`: the caller has been waiting for it (counted in `waited`)."""
        with self._cond:
            self._age_out()
            if not self._free:
                return None
            self.waited += after_wait
            return self._free.pop()[0]

    def acquire(self):
        deadline = time.monotonic() + self.acquire_timeout_secs
        with self._cond:
            while not self._free and self.total >= self.max_total:
                left = deadline - time.monotonic()
                if left <= 0 or not self._cond.wait(left):
                    if not self._free and self.total >= self.max_total:
                        raise TimeoutError(f"all {self.max_total} pocketsphinx decoders busy")
            self._age_out()
            if self._free:
                return self._free.pop()[0]
            self.total += 1
            self.created += 1
        try:
            return self._new()
        except Exception:
            with self._cond:
                self.total -= 1
                self._cond.notify()
            raise

    def release(self, decoder) -> None:
        with self._cond:
            self._free.append((decoder, self._clock()))
            self._age_out()
            self._cond.notify()

    def _age_out(self) -> None:
        """(holding the lock) Drop idle decoders beyond `max_idle` unused for `idle_secs`."""
        cutoff = self._clock() - self.idle_secs
        while len(self._free) > self.max_idle and self._free[0][1] <= cutoff:
            del self._free[0]
            self.total -= 1
            self.discarded += 1

    def discard(self, decoder) -> None:
        """Drop a decoder in an unknown state (an error mid-utterance)."""
        with self._cond:
            self.total -= 1
            self.discarded += 1
            self._cond.notify()

    def transcribe(self, pcm: bytes) -> str:
        """Whole-utterance decode (16 kHz int16 PCM) -> text; blocking."""
        decoder = self.acquire()
        try:
            decoder.start_utt()
            decoder.process_raw(pcm, full_utt=True)
            decoder.end_utt()
            return _hyp_text(decoder)
        finally:
            self.release(decoder)


async def wait_for_idle(pool: DecoderPool):
    """An idle decoder of `pool`, waiting up to `pool.build_wait_secs` for a busy one to come
    back (polled on the event loop, no thread held); None if none came."""
    decoder = pool.try_acquire()
    if decoder is not None or pool.build_wait_secs <= 0:
        return decoder
    loop = asyncio.get_running_loop()
    give_up = loop.time() + pool.build_wait_secs
    while decoder is None and loop.time() < give_up:
        await asyncio.sleep(DECODER_POLL_SECS)
        decoder = pool.try_acquire(after_wait=True)
    return decoder


def _hyp_text(decoder) -> str:
    hyp = decoder.hyp()
    return hyp.hypstr.strip() if hyp is not None else ""


class PocketsphinxSTT(StreamingSegmentSTT):
    def __init__(self, pool: DecoderPool, *, trailing_silence_secs: float = 0.0, **kwargs) -> None:
        super().__init__(
            settings=STTSettings(model="pocketsphinx-en-us", language=None),
            ttfs_p99_latency=POCKETSPHINX_TTFS_P99_CPU,
            **kwargs,
        )
        self._pool = pool
        self._trailing_silence = bytes(int(16000 * trailing_silence_secs) * 2)

    async def _run_segment(self, segment: Segment) -> str:
        if self.sample_rate != 16000:
            raise ValueError(f"pocketsphinx needs 16 kHz input, not {self.sample_rate} Hz")
        pool = self._pool

        def release_abandoned(future) -> None:  # acquire finished after we stopped waiting
            if not future.cancelled() and future.exception() is None:
                _Lease(pool, future.result()).give_back()

        decoder = await wait_for_idle(pool)  # rather than build one (a build freezes the loop)
        if decoder is None:
            decoder = await self._in_thread(pool.acquire, release_abandoned)
        lease = _Lease(pool, decoder)
        thread_busy = False

        async def in_thread(fn):
            nonlocal thread_busy
            thread_busy = True
            try:
                result = await self._in_thread(fn, lambda _f: ASR_EXECUTOR.submit(lease.give_back))
            except asyncio.CancelledError:
                raise  # the thread still runs: it gives the decoder back when it ends
            except BaseException:
                thread_busy = False
                raise
            thread_busy = False
            return result

        try:
            await in_thread(lease.start)
            fed = 0  # bytes of segment.audio already decoded
            while True:
                closed = segment.closed  # read before the audio: nothing may slip past a close
                if len(segment.audio) > fed or closed:
                    pcm = bytes(segment.audio[fed:])
                    fed += len(pcm)
                    if closed:
                        pcm += self._trailing_silence
                    segment.passes += 1
                    text = await in_thread(lambda p=pcm, c=closed: lease.feed(p, c))
                    if closed:
                        return text
                    await self._push_interim(segment, text)
                else:
                    await segment.wait_changed(None)
        finally:
            if not thread_busy:
                ASR_EXECUTOR.submit(lease.give_back)


class _Lease:
    """One decoder taken from the pool for one segment; thread-side methods only."""

    def __init__(self, pool: DecoderPool, decoder) -> None:
        self.pool = pool
        self.decoder = decoder
        self.in_utt = False
        self.returned = False
        self._lock = threading.Lock()

    def start(self) -> None:
        self.decoder.start_utt()
        self.in_utt = True

    def feed(self, pcm: bytes, last: bool) -> str:
        # in pieces of FEED_BYTES: pocketsphinx holds the GIL inside process_raw, so one large
        # batch (a slow machine's backlog) would stall the event loop and every other call
        for i in range(0, len(pcm), FEED_BYTES):  # (an empty buffer is an error to pocketsphinx)
            self.decoder.process_raw(pcm[i:i + FEED_BYTES], no_search=False, full_utt=False)
        if last:
            self.decoder.end_utt()
            self.in_utt = False
        return _hyp_text(self.decoder)

    def give_back(self) -> None:
        with self._lock:
            if self.returned:
                return
            self.returned = True
        if self.in_utt:
            try:
                self.decoder.end_utt()
                self.in_utt = False
            except Exception:
                self.pool.discard(self.decoder)
                return
        self.pool.release(self.decoder)
