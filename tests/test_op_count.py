"""The number of tensor operations a batched iteration dispatches does not grow with the
number of clients in its chunk (decent/engine/op_count.py, decent/tools/op_counts.py)."""

from __future__ import annotations

import pytest
import torch

from decent.engine import op_count
from decent.engine.op_count import OpCounter
from decent.tools import op_counts


def test_the_counter_tells_kernels_views_and_draws_apart_by_region():
    g = torch.Generator().manual_seed(0)
    x = torch.ones(4, 3)
    counter = OpCounter()
    with counter:
        y = x + 1  # a kernel, in the client region
        with op_count.region(op_count.CHUNK):
            z = torch.randn(4, 3, generator=g)  # a draw
            w = (y * z).t()  # a kernel and a view
            w.sum()  # a kernel
    assert counter.counts == {"client": 1, "chunk": 2}
    assert counter.draws == {"chunk": 1}
    assert counter.views == {"chunk": 1}
    assert counter.names["chunk"] == {"mul": 1, "sum": 1}
    with op_count.region(op_count.CHUNK):  # no counter active: nothing is counted
        x * 2
    assert counter.counts == {"client": 1, "chunk": 2}


@pytest.mark.parametrize("workload", list(op_counts.workloads(4)))
def test_a_chunk_of_16_clients_dispatches_the_kernels_of_a_chunk_of_4(workload):
    """One batched round of each family at 4 and at 16 clients, all in one chunk: the
    chunk's kernels the same within 10 %; each client's own draws grow with the clients
    (they are the sequential run's), and nothing else does."""
    small, large = (op_counts.count(workload, n) for n in (4, 16))
    assert small.chunk > 0
    assert large.chunk <= 1.1 * small.chunk, (small.top, large.top)
    assert large.chunk_draws == 4 * small.chunk_draws
