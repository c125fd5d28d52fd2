"""Small torch ops on a thread other than the main one, with torch's default threads and with
one (docs/perf.md, "The worker-thread fix"; EngineConfig.worker_threads).

    python docs/perf-cpu-block-steps/omp_threads.py small   # per-op cost, main vs other thread
    python docs/perf-cpu-block-steps/omp_threads.py large   # what one thread costs a 512x512 mm

Each mode in its own process (the main thread's OpenMP team is what matters). Prints one line
per case: threads, then the microseconds per iteration.
"""

import sys
import threading
import time

import torch

x = torch.randn(1, 8, 64)
w = torch.randn(64, 64)
big = torch.randn(512, 512)


def per_call_us(fn, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t) / n * 1e6


def small(tag: str, threads: int | None = None) -> None:
    if threads:
        torch.set_num_threads(threads)
    per_call_us(lambda: (x @ w).softmax(-1), 2000)  # warm
    mm = per_call_us(lambda: (x @ w).softmax(-1), 20000)
    soft = per_call_us(lambda: x.softmax(-1), 20000)
    print(f"{tag}: {torch.get_num_threads()} threads, {mm:.2f} us matmul+softmax [1,8,64], "
          f"{soft:.2f} us softmax", flush=True)


def large(tag: str, threads: int | None = None) -> None:
    if threads:
        torch.set_num_threads(threads)
    per_call_us(lambda: (x @ w).softmax(-1), 2000)
    mm = per_call_us(lambda: (x @ w).softmax(-1), 20000)
    square = per_call_us(lambda: big @ big, 200)
    print(f"{tag}: {torch.get_num_threads()} threads, {mm:.2f} us small, {square:.1f} us 512x512 "
          "matmul", flush=True)


def on_thread(fn, tag: str, threads: int | None) -> None:
    worker = threading.Thread(target=fn, args=(tag, threads))
    worker.start()
    worker.join()


if __name__ == "__main__":
    if sys.argv[1] == "small":
        small("main thread")
        for n in (None, 1, 2):
            on_thread(small, f"other thread, set_num_threads({n})", n)
    else:
        large("main thread")
        torch.set_num_threads(1)
        for n in (2, 1):
            on_thread(large, f"other thread, set_num_threads({n}) (main set to 1)", n)
