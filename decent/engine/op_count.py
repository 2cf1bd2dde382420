"""How many tensor operations an iteration dispatches, and where: the measure of a hot
path that does whole-tensor work over the client dimension.

On a GPU every aten operation is (at least) one kernel launch, paid by the host; a Python
loop over a chunk's clients or its messages launches a number of kernels that grows with
the chunk, and the device waits on the host. A :class:`OpCounter` is a
``TorchDispatchMode``: every aten operation dispatched while it is active is counted, in
the region the code is in (:meth:`OpCounter.region`; ``client`` outside every region).

Two kinds are counted apart, because they launch no device kernel: **views** (an
operation whose output aliases its input: ``select``, ``view``, ``transpose``…, metadata
only) and **draws** from a client's own CPU generator (``generator=`` given, on the CPU):
each client's stream of batches and seeds, which is what makes a batched run the
sequential run. What is left, ``counts``, is the kernels a device would launch (on a CPU:
the operator calls).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch.utils._python_dispatch import TorchDispatchMode

CLIENT = "client"  # a client's own phase code, outside every region
CHUNK = "chunk"  # a chunk's stacked computation (the batched executor's serve)

_active: list[OpCounter] = []  # the counters now counting (innermost last)


@contextmanager
def region(name: str) -> Iterator[None]:
    """What runs inside is counted under ``name`` by the active counter; nothing where
    none is (the engine marks its regions at no cost to a run that counts nothing)."""
    if not _active:
        yield
        return
    with _active[-1].region(name):
        yield


class OpCounter(TorchDispatchMode):
    """Counts of aten operations by region, and of each region's operations by name."""

    def __init__(self) -> None:
        super().__init__()
        self.where = CLIENT
        self.counts: Counter[str] = Counter()
        self.draws: Counter[str] = Counter()
        self.views: Counter[str] = Counter()
        self.names: dict[str, Counter[str]] = {}

    @contextmanager
    def region(self, name: str) -> Iterator[None]:
        """Count what runs inside under ``name``."""
        before, self.where = self.where, name
        try:
            yield
        finally:
            self.where = before

    def __enter__(self) -> OpCounter:
        _active.append(self)
        return super().__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: Any) -> None:
        _active.remove(self)
        super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (),
                           kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        gen = kwargs.get("generator")
        if gen is not None and gen.device.type == "cpu":
            self.draws[self.where] += 1
        elif func.is_view:
            self.views[self.where] += 1
        else:
            self.counts[self.where] += 1
            self.names.setdefault(self.where, Counter())[func.overloadpacket.__name__] += 1
        return func(*args, **kwargs)

