"""Issue 12, problem 3: per-IP session slots and the idle / max-duration watchdog."""

import asyncio

import pytest

from diffvoice.voice.call_limits import CallWatchdog, ClientSlots


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
