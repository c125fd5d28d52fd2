"""LagWatch: a call's audio reaching a stage late is logged (at most once per every_secs);
audio on time is not."""

import time
from types import SimpleNamespace

from loguru import logger

from diffvoice.voice.lag_watch import LagWatch


def _capture():
    lines = []
    sink = logger.add(lambda m: lines.append(str(m)), level="INFO", format="{message}")
    return lines, sink


def test_late_frames_are_logged_once_per_interval():
    lines, sink = _capture()
    try:
        watch = LagWatch("ASR", "call-1", limit_secs=1.0, every_secs=60.0)
        watch.frame(SimpleNamespace(received_t=time.time() - 0.2))  # on time
        watch.frame(SimpleNamespace())  # unstamped frames are ignored
        assert lines == []
        watch.frame(SimpleNamespace(received_t=time.time() - 2.5))
        watch.frame(SimpleNamespace(received_t=time.time() - 3.0))  # within every_secs
    finally:
        logger.remove(sink)
    assert len(lines) == 1 and "call-1: caller audio reaches the ASR 2.5" in lines[0]
    assert 2.9 < watch.worst < 3.5


def test_a_stream_falling_behind_the_clock_is_logged():
    lines, sink = _capture()
    try:
        watch = LagWatch("VAD", "call-2", limit_secs=1.0)
        watch.stream(16000, 16000)  # 1 s of audio now: the best moment so far
        watch.stream(16000 + 160, 16000)  # 10 ms more audio straight after: on time
        assert lines == [] and watch.worst < 0.5
        watch._origin -= 2.0  # as if 2 s of wall clock had passed with no more audio
        watch.stream(16000 + 320, 16000)
    finally:
        logger.remove(sink)
    assert len(lines) == 1 and "VAD" in lines[0] and 1.9 < watch.worst < 2.5
