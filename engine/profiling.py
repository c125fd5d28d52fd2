"""What the engine's worker does per pass besides the model's forward: host reads and aten ops.

    with HostReads() as reads:          # on the thread that runs the passes
        runner.step(rows)
    reads.count, reads.by_name          # tensor values the host consumed (.tolist(), .item(),
                                        # bool(t), int(t), .cpu(), ...)
    with AtenOps() as ops:
        runner.step(rows)
    ops.count                           # aten operators dispatched

A host read is any place the host consumes a tensor's values: on CUDA each is a device-to-host
copy the host waits for (a sync), on a CPU a conversion. Counted with a TorchFunctionMode, so
every path is seen, the model's and the policies' included, not only the runner's own read
points. Both modes slow what they watch: count in one run, time in another. Both are
thread-local (torch's mode stack): enter them on the engine's worker thread, e.g. around
`ModelRunner.step`. Knows nothing about the engine.
"""

from __future__ import annotations

import threading
from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import (
    TorchDispatchMode,
    _disable_current_modes,
    _get_current_dispatch_mode_stack,
)

# Tensor methods whose result is host data computed from the tensor's values
READS = frozenset({"tolist", "item", "__bool__", "__int__", "__float__", "__index__", "cpu",
                   "numpy", "__array__", "__format__", "__repr__"})


class _Counts:
    """by_name: what was counted, per name; count: all of it."""

    def __init__(self):
        super().__init__()
        self.by_name: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return sum(self.by_name.values())


class HostReads(_Counts, TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if name in READS or (name == "to" and _to_host(args, kwargs or {})):
            self.by_name[name] += 1
        return func(*args, **(kwargs or {}))


def _to_host(args, kwargs) -> bool:
    """t.to("cpu") / t.to(torch.device("cpu")) from a non-CPU tensor."""
    if not args or not isinstance(args[0], torch.Tensor) or args[0].device.type == "cpu":
        return False
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    return isinstance(target, str | torch.device) and torch.device(target).type == "cpu"


class AtenOps(_Counts, TorchDispatchMode):
    """Counts the aten operators dispatched (views and in-place ops included). A Triton
    kernel launch counts as one operator, "triton.<kernel>": compiled (CUDA) it dispatches
    none, and under Triton's CPU interpreter the interpreter's own tensor copies inside it are
    not counted."""

    def __init__(self):
        super().__init__()
        self.metadata = 0  # of count: views and allocations, which launch no device work

    @property
    def launches(self) -> int:
        """Operators that do device work (a kernel each on a GPU): count less metadata."""
        return self.count - self.metadata

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_name[str(func.overloadpacket)] += 1
        if func.is_view or func.overloadpacket in _ALLOCATIONS:
            self.metadata += 1
        return func(*args, **(kwargs or {}))

    def __enter__(self):
        _launches.watch()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            _launches.unwatch()


_ALLOCATIONS = frozenset({torch.ops.aten.empty, torch.ops.aten.empty_like,
                          torch.ops.aten.empty_strided, torch.ops.aten.new_empty,
                          torch.ops.aten.new_empty_strided, torch.ops.aten.lift_fresh})


class _TritonLaunches:
    """Wraps the `run` of Triton's kernel classes (compiled and interpreted) while any AtenOps
    is open: a launch is counted by the innermost AtenOps of the launching thread and runs with
    the dispatch modes off."""

    def __init__(self):
        self.depth, self.saved = 0, []
        self.lock = threading.Lock()  # AtenOps may open on several threads

    def watch(self) -> None:
        with self.lock:
            self.depth += 1
            if self.depth > 1:
                return
            try:
                from triton.runtime.interpreter import InterpretedFunction
                from triton.runtime.jit import JITFunction
            except ImportError:  # no triton: nothing launches
                return
            for cls in (InterpretedFunction, JITFunction):
                original = cls.run
                self.saved.append((cls, original))
                cls.run = _counted_launch(original)

    def unwatch(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0:
                for cls, original in self.saved:
                    cls.run = original
                self.saved.clear()


def _counted_launch(run):
    def launch(kernel, *args, **kwargs):
        counter = next((m for m in reversed(_get_current_dispatch_mode_stack())
                        if isinstance(m, AtenOps)), None)
        if counter is None or kwargs.get("warmup"):
            return run(kernel, *args, **kwargs)
        name = getattr(getattr(kernel, "fn", None), "__name__", "kernel")
        counter.by_name[f"triton.{name}"] += 1
        with _disable_current_modes():
            return run(kernel, *args, **kwargs)
    return launch


_launches = _TritonLaunches()
