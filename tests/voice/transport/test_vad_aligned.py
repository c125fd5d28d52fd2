"""Caller audio reaches the pipeline in whole 32 ms VAD windows (voice.transport.vad_aligned):
fewer frames on the event loop, no audio lost or reordered, every window handed on as soon as
the wire frame completing it arrives, and the VAD's decisions unchanged."""

import numpy as np
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADState
from pipecat.frames.frames import InputAudioRawFrame

from diffvoice.voice.transport.vad_aligned import VadAlignedInput


class _Recorder:
    def __init__(self) -> None:
        self.pushed: list[InputAudioRawFrame] = []

    async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
        self.pushed.append(frame)


class _Aligned(VadAlignedInput, _Recorder):
    pass


def _frame(pcm: bytes, rate=16000) -> InputAudioRawFrame:
    return InputAudioRawFrame(audio=pcm, sample_rate=rate, num_channels=1)


async def test_random_pieces_come_out_as_whole_windows_in_order():
    rng = np.random.default_rng(0)
    for rate in (16000, 8000):
        window = int(rate * 0.032) * 2
        sink = _Aligned()
        sent = bytearray()
        for _ in range(300):
            piece = rng.integers(-3000, 3000, int(rng.integers(1, 900)), dtype=np.int16).tobytes()
            sent += piece
            before = len(sink.pushed)
            await sink.push_audio_frame(_frame(piece, rate))
            out = b"".join(f.audio for f in sink.pushed)
            # everything whole is handed on at once; only a partial window waits
            assert len(out) == len(sent) // window * window
            assert out == bytes(sent[:len(out)])
            assert all(len(f.audio) % window == 0 and f.sample_rate == rate
                       for f in sink.pushed[before:])


async def test_twenty_ms_frames_become_fewer_frames():
    sink = _Aligned()
    for _ in range(400):  # 8 s of 20 ms frames
        await sink.push_audio_frame(_frame(b"\x01\x00" * 320))
    assert len(sink.pushed) == 250  # 8 s / 32 ms, instead of 400


async def test_a_format_change_flushes_the_partial_window_first():
    sink = _Aligned()
    await sink.push_audio_frame(_frame(b"\x01\x00" * 300, 16000))
    await sink.push_audio_frame(_frame(b"\x02\x00" * 256, 8000))
    assert [(len(f.audio), f.sample_rate) for f in sink.pushed] == [(600, 16000), (512, 8000)]


async def test_vad_states_per_window_are_the_same_as_with_wire_frames(speech):
    pcm = speech("what time do you open on saturday", lead_silence=0.4, tail_silence=0.8) * 2
    wire = [pcm[i:i + 640] for i in range(0, len(pcm), 640)]

    async def states_at_windows(frames):
        vad = SileroVADAnalyzer()
        vad.set_sample_rate(16000)
        got, fed = {}, 0
        for f in frames:
            state = await vad.analyze_audio(f)
            fed += len(f)
            got[fed // 1024] = state  # the state once this many whole windows were analysed
        return got

    sink = _Aligned()
    for f in wire:
        await sink.push_audio_frame(_frame(f))
    direct = await states_at_windows(wire)
    aligned = await states_at_windows([f.audio for f in sink.pushed])
    assert len(aligned) > 100 and set(aligned) <= set(direct)
    assert all(direct[w] == s for w, s in aligned.items())
    assert VADState.SPEAKING in aligned.values() and VADState.QUIET in aligned.values()


async def test_frames_of_several_windows_keep_every_sample_in_order():
    """input_frame_ms=64 / 96 (windows_per_frame 2 / 3): frames of whole multiples of the
    frame size, nothing lost or reordered, only a partial frame waits."""
    rng = np.random.default_rng(1)
    for per_frame in (2, 3):
        sink = _Aligned()
        sink.windows_per_frame = per_frame
        size = 1024 * per_frame
        sent = bytearray()
        for _ in range(200):
            piece = rng.integers(-3000, 3000, int(rng.integers(1, 900)), dtype=np.int16).tobytes()
            sent += piece
            await sink.push_audio_frame(_frame(piece))
            out = b"".join(f.audio for f in sink.pushed)
            assert len(out) == len(sent) // size * size
            assert out == bytes(sent[:len(out)])
        assert all(len(f.audio) % size == 0 for f in sink.pushed)
    sink = _Aligned()
    sink.windows_per_frame = 2
    for _ in range(400):  # 8 s of 20 ms frames -> 125 frames of 64 ms
        await sink.push_audio_frame(_frame(b"\x01\x00" * 320))
    assert len(sink.pushed) == 125


class _Handler(VadAlignedInput):
    """The audio task of a transport: its queue, pipecat's params and push_frame recorded."""

    def __init__(self, audio_filter=None) -> None:
        import asyncio
        from types import SimpleNamespace

        super().__init__()
        self._audio_in_queue = asyncio.Queue()
        self._params = SimpleNamespace(audio_in_filter=audio_filter, audio_in_passthrough=True)
        self.pushed: list[InputAudioRawFrame] = []

    async def push_frame(self, frame, direction=None) -> None:
        self.pushed.append(frame)


async def test_a_backlog_goes_downstream_merged_in_order_and_live_frames_alone():
    """pipecat's handler took one frame per wait_for (two loop turns each): a call that fell
    behind stayed behind. Queued frames now go on as one frame of <= 16 windows, in order,
    split at a format change; every queued frame is marked done."""
    import asyncio

    from diffvoice.voice.transport.vad_aligned import MAX_MERGED_WINDOWS

    handler = _Handler()
    queue = handler._audio_in_queue
    rng = np.random.default_rng(1)
    sent = [rng.integers(-3000, 3000, 512, dtype=np.int16).tobytes() for _ in range(40)]
    for pcm in sent:
        queue.put_nowait(_frame(pcm))
    queue.put_nowait(_frame(b"\x03\x00" * 256, 8000))  # a format change ends a merge
    task = asyncio.create_task(handler._audio_task_handler())
    await asyncio.wait_for(queue.join(), 5)
    sizes = [(len(f.audio) // 1024, f.sample_rate) for f in handler.pushed]
    assert sizes == [(MAX_MERGED_WINDOWS, 16000), (MAX_MERGED_WINDOWS, 16000), (8, 16000),
                     (0, 8000)]
    assert b"".join(f.audio for f in handler.pushed[:3]) == b"".join(sent)
    assert len(handler.pushed[3].audio) == 512
    queue.put_nowait(_frame(sent[0]))  # on time: a frame alone, at once
    await asyncio.wait_for(queue.join(), 5)
    assert len(handler.pushed) == 5 and handler.pushed[4].audio == sent[0]
    task.cancel()


async def test_the_audio_filter_still_applies():
    import asyncio

    class Halve:
        async def filter(self, audio: bytes) -> bytes:
            return audio[: len(audio) // 2]

    handler = _Handler(Halve())
    handler._audio_in_queue.put_nowait(_frame(b"\x01\x00" * 512))
    task = asyncio.create_task(handler._audio_task_handler())
    await asyncio.wait_for(handler._audio_in_queue.join(), 5)
    assert [len(f.audio) for f in handler.pushed] == [512]
    task.cancel()


async def test_a_backlog_before_the_vad_makes_frames_longer_until_it_is_gone():
    """backlog(): pushed audio the VAD has not received. Above 0.1 s new frames are 8 windows
    (8x fewer VAD round trips); under it, one window again; no audio lost or reordered."""
    from diffvoice.voice.transport.vad_aligned import CATCH_UP_WINDOWS

    sink = _Aligned()
    lag = [0.0]
    sink.backlog = lambda: lag[0]
    sent = bytearray()
    for i in range(300):  # 6 s of 20 ms wire frames; behind from 1 s to 4 s
        lag[0] = 0.5 if 50 <= i < 200 else 0.0
        pcm = bytes([i % 256, 0]) * 320
        sent += pcm
        await sink.push_audio_frame(_frame(pcm))
    sizes = [len(f.audio) // 1024 for f in sink.pushed]
    # (when the backlog is gone the windows already buffered go on at once, as one frame)
    assert {1, CATCH_UP_WINDOWS} <= set(sizes) <= set(range(1, CATCH_UP_WINDOWS + 1))
    assert sink.catch_up_frames == sizes.count(CATCH_UP_WINDOWS) >= 10
    start = sizes.index(CATCH_UP_WINDOWS)
    back = len(sizes) - 1 - sizes[::-1].index(CATCH_UP_WINDOWS)
    assert all(n == 1 for n in sizes[:start]) and all(n == 1 for n in sizes[back + 2:])
    assert b"".join(f.audio for f in sink.pushed) == bytes(sent[:len(sent) // 1024 * 1024])
    assert abs(sink.pushed_secs - sum(sizes) * 0.032) < 1e-9


async def test_the_input_queue_is_bounded_and_drains():
    """Caller audio waiting in pipecat's input queue never exceeds MAX_QUEUED_SECS: with no
    consumer, 30 s pushed leaves 20 s queued and the rest dropped; taken frames free room."""
    import asyncio

    from diffvoice.voice.transport.vad_aligned import MAX_QUEUED_SECS

    class _Queued:
        def __init__(self) -> None:
            self._audio_in_queue = asyncio.Queue()

        async def push_audio_frame(self, frame: InputAudioRawFrame) -> None:
            await self._audio_in_queue.put(frame)

    class _Bounded(VadAlignedInput, _Queued):
        pass

    sink = _Bounded()
    for _ in range(1500):  # 30 s of 20 ms frames
        await sink.push_audio_frame(_frame(b"\x01\x00" * 320))
    queued = sum(len(f.audio) for f in sink._audio_in_queue._queue) / 32000
    assert abs(queued - MAX_QUEUED_SECS) < 0.05 and abs(sink.queued_secs - queued) < 1e-6
    assert abs(sink.dropped_secs + queued - 30.0) < 0.05
    while not sink._audio_in_queue.empty():
        sink._taken(sink._audio_in_queue.get_nowait())
    assert sink.queued_secs == 0.0
    await sink.push_audio_frame(_frame(b"\x01\x00" * 512))
    assert sink._audio_in_queue.qsize() == 1  # room again
