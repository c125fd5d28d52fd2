"""voice.task_dump: SIGUSR1 logs where every asyncio task of the loop is suspended, with the whole
await chain (not only the task's outer coroutine), grouped by stack."""

import asyncio
import os
import signal

from loguru import logger

from diffvoice.voice import task_dump


async def _inner_wait(event):
    await event.wait()


async def _outer(event):
    await _inner_wait(event)


async def test_dump_shows_each_tasks_await_chain_grouped():
    event = asyncio.Event()
    tasks = [asyncio.create_task(_outer(event), name=f"waiter-{i}") for i in range(3)]
    await asyncio.sleep(0)
    text = task_dump.dump(asyncio.get_running_loop())
    line = next(x for x in text.splitlines() if "_inner_wait" in x)
    assert line.strip().startswith("3 x [waiter]")
    # innermost first: the lock wait, then our two coroutines, outer last
    assert line.index("wait") < line.index("_inner_wait") < line.index("_outer")
    event.set()
    await asyncio.gather(*tasks)


async def test_sigusr1_logs_the_dump():
    loop = asyncio.get_running_loop()
    assert task_dump.install(loop)
    seen = []
    sink = logger.add(lambda m: seen.append(str(m)), level="WARNING")
    try:
        event = asyncio.Event()
        task = asyncio.create_task(_outer(event), name="sleeper")
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGUSR1)
        for _ in range(100):
            if seen:
                break
            await asyncio.sleep(0.01)
        assert seen and "asyncio tasks" in seen[0] and "_inner_wait" in seen[0]
        event.set()
        await task
    finally:
        logger.remove(sink)
        loop.remove_signal_handler(signal.SIGUSR1)
