"""Issue 12, problem 3: per-IP session slots and the idle / max-duration watchdog. Issue 54 N5:
idleness is measured in seconds of caller audio, not in frames; N6: browser sessions leave the
phone callers' share of max_sessions."""

import asyncio

import pytest

from diffvoice.voice.call_limits import CallWatchdog, ClientSlots, browser_session_limit
from diffvoice.voice.config import ServeConfig


def test_client_slots_cap_each_ip_and_release():
    slots = ClientSlots(2)
    assert slots.acquire("a") and slots.acquire("a")
    assert not slots.acquire("a")
    assert slots.acquire("b")
    assert slots.held() == 3
    slots.release("a")
    assert slots.acquire("a")
    for ip in ("a", "a", "b"):
        slots.release(ip)
    assert slots.held() == 0
    slots.release("never")  # harmless
    assert slots.held() == 0
    with pytest.raises(ValueError):
        ClientSlots(0)


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_watchdog_due():
    clock = _Clock()
    dog = CallWatchdog(10, 100, on_expire=None, clock=clock)
    assert dog.due() == (None, 10)
    clock.t = 9
    dog.touch()
    clock.t = 18
    assert dog.due()[0] is None
    clock.t = 19.5
    assert dog.due() == ("idle_timeout", 0.0)
    clock.t = 100
    dog.touch()
    assert dog.due() == ("max_duration", 0.0)


async def test_watchdog_fires_once_on_idle():
    reasons = []

    async def on_expire(reason):
        reasons.append(reason)

    dog = CallWatchdog(0.2, 30, on_expire)
    dog.start()
    for _ in range(3):  # activity keeps it alive
        await asyncio.sleep(0.1)
        dog.touch()
    assert reasons == []
    await asyncio.sleep(0.5)
    assert reasons == ["idle_timeout"] and dog.expired == "idle_timeout"
    await dog.stop()


def test_empty_or_tiny_frames_do_not_keep_a_silent_call_alive():
    clock = _Clock()
    dog = CallWatchdog(30, 3600, on_expire=None, clock=clock)
    for t in range(20, 200, 20):  # an empty frame, then one sample, every 20 s
        clock.t = t
        dog.heard(0.0)
        dog.heard(1 / 16000)
    clock.t = 30
    assert dog.due()[0] == "idle_timeout"


def test_real_audio_restarts_the_idle_clock():
    clock = _Clock()
    dog = CallWatchdog(30, 3600, on_expire=None, clock=clock)
    for step in range(1, 1000):  # 20 ms frames in real time for 20 s, after 25 s of nothing
        clock.t = 25 + step * 0.02
        dog.heard(0.02)
    clock.t = 50
    assert dog.due()[0] is None and dog.last_activity >= 44


async def test_fire_ends_the_call_once_with_its_reason():
    reasons = []

    async def on_expire(reason):
        reasons.append(reason)

    dog = CallWatchdog(0.1, 30, on_expire)
    dog.start()
    dog.fire("output_stalled")
    dog.fire("other")
    await asyncio.sleep(0.3)  # past idle_timeout too: still one reason
    assert reasons == ["output_stalled"] and dog.expired == "output_stalled"
    await dog.stop()


def test_browser_sessions_leave_the_phone_share(monkeypatch):
    monkeypatch.delenv("TWILIO_AUTH_TOKEN", raising=False)
    assert browser_session_limit(ServeConfig(max_sessions=32)) == 32  # no Twilio: no reserve
    phones = ServeConfig(max_sessions=32, twilio_auth_token="t")
    assert browser_session_limit(phones) == 16
    assert browser_session_limit(ServeConfig(max_sessions=10, twilio_auth_token="t",
                                             max_phone_calls=2)) == 8
    assert browser_session_limit(ServeConfig(max_sessions=10, twilio_validate=False)) == 5
    assert browser_session_limit(ServeConfig(max_sessions=10, max_browser_sessions=4)) == 4
    assert browser_session_limit(ServeConfig(max_sessions=3, max_browser_sessions=9)) == 3
    with pytest.raises(ValueError, match="max_browser_sessions"):
        ServeConfig(max_browser_sessions=0)
