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

from collections import Counter

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

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
    """Counts the aten operators dispatched (views and in-place ops included)."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.by_name[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))
