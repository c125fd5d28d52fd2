"""SIGUSR1 -> every asyncio task of the server's loop, with where it is suspended (diagnostics).

Contract: `install(loop)` (called once at server start, main thread) makes `kill -USR1 <pid>`
log one WARNING block: the number of tasks, then per task its name and innermost `depth` frames
(file:line function), tasks with the same stack grouped with a count. A live server that stops
answering some calls can so show which await each session is stuck in, without a debugger or a
restart. `dump(loop)` returns the same text. Where signals are unavailable (not the main thread,
Windows) `install` does nothing and returns False.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter

from loguru import logger


def _chain(task: asyncio.Task) -> list:
    """The frames of the task's await chain, outermost first (coroutines, async generators and
    the futures they wait on)."""
    frames, obj = [], task.get_coro()
    for _ in range(64):
        frame = getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None) \
            or getattr(obj, "gi_frame", None)
        if frame is None:
            break
        frames.append(frame)
        obj = getattr(obj, "cr_await", None) or getattr(obj, "ag_await", None) \
            or getattr(obj, "gi_yieldfrom", None)
        if obj is None:
            break
    return frames


def _where(task: asyncio.Task, depth: int) -> str:
    frames = _chain(task)[-depth:]
    if not frames:
        return "(no frames: done or not started)"
    return " <- ".join(f"{f.f_code.co_filename.rsplit('/', 2)[-1]}:{f.f_lineno} "
                       f"{f.f_code.co_name}" for f in reversed(frames))


def dump(loop: asyncio.AbstractEventLoop, depth: int = 8) -> str:
    tasks = asyncio.all_tasks(loop)
    groups = Counter(_where(t, depth) for t in tasks)
    names = Counter((t.get_name().split("-")[0], _where(t, depth)) for t in tasks)
    lines = [f"{len(tasks)} asyncio tasks, {len(groups)} distinct stacks (innermost first):"]
    for where, n in groups.most_common():
        kinds = sorted({name for name, w in names if w == where})[:4]
        lines.append(f"  {n:4d} x [{', '.join(kinds)}] {where}")
    return "\n".join(lines)


def install(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        loop.add_signal_handler(signal.SIGUSR1, lambda: logger.warning(dump(loop)))
    except (NotImplementedError, RuntimeError, ValueError, AttributeError):
        return False
    return True
