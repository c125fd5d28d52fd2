"""voice.loop_lag: a callback that holds the event loop shows up as timer lateness of about its
length in the next window (and in /metrics), a free loop as little; windows reset on take()."""

import asyncio
import time
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from diffvoice.voice.loop_lag import LoopLag
from diffvoice.voice.metrics import VoiceMetrics


def _hold_the_loop(seconds: float) -> None:
    """What a blocking callback does (on purpose: the thing the monitor must see)."""
    time.sleep(seconds)


async def test_a_blocked_loop_reads_as_lag_and_the_window_resets():
    lag = LoopLag(interval_s=0.02).start()
    try:
        await asyncio.sleep(0.1)
        lag.take()  # start clean
        _hold_the_loop(0.3)
        await asyncio.sleep(0.1)
        worst, mean = lag.take()
        assert 0.25 <= worst < 1.0 and 0 < mean <= worst
        await asyncio.sleep(0.2)
        worst, _ = lag.take()
        assert worst < 0.2  # nothing blocked the loop in this window
        metrics = VoiceMetrics()
        _hold_the_loop(0.15)
        await asyncio.sleep(0.05)
        metrics.observe_server(SimpleNamespace(loop_lag=lag))
        got = {s.labels["stat"]: s.value
               for f in text_string_to_metric_families(metrics.render()[0].decode())
               if f.name == "diffvoice_event_loop_lag_seconds" for s in f.samples}
        assert 0.1 <= got["max"] < 1.0 and 0 < got["mean"] <= got["max"]
    finally:
        lag.stop()
