"""Which loopback address a simulated caller connects from.

All of 127.0.0.0/8 reaches the local server, and the server sees each as a distinct client IP,
so a harness can play many callers (each under the server's per-IP session cap) or one greedy
client on one machine. `use_source_ip("127.0.0.9")` sets it for the current asyncio task and
the tasks it starts (a ContextVar); `connect_kwargs()` is what the load clients pass to
`websockets.connect` (`{}` when unset: the OS picks, as before).
"""

from __future__ import annotations

import contextvars
from typing import Any

_SOURCE_IP: contextvars.ContextVar[str | None] = contextvars.ContextVar("source_ip", default=None)


def use_source_ip(ip: str | None) -> None:
    _SOURCE_IP.set(ip)


def connect_kwargs() -> dict[str, Any]:
    ip = _SOURCE_IP.get()
    return {"local_addr": (ip, 0)} if ip else {}


def loopback_ip(n: int) -> str:
    """The n-th distinct loopback address (n >= 0): 127.0.1.1, 127.0.1.2, ..."""
    if not 0 <= n < 250 * 250:
        raise ValueError(f"n must be in [0, 62500), got {n}")
    return f"127.0.{1 + n // 250}.{1 + n % 250}"
