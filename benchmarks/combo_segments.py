"""What Combo's segmented gossip costs one worker per round, against a DSGD round.

On the real parameter shapes of SmolLM2-135M (134.5M trainable fp32 values), one worker's
message handling in one round, without the local steps (the same for both methods):

1. DSGD on a ring (2 neighbours, Metropolis weights 1/3): build the outgoing payload
   (``params.snapshot``) and mix the 2 received payloads into the model in place
   (``gossip.average_with_neighbours``);
2. Combo with S segments and R replicas (S = 1, 4, 10; R = 2): flatten the model
   (``params.flat_tensor``), answer S·R segment requests (``Combo.serve``: a slice and a copy per
   request, what a worker serves per round on average), then aggregate every segment from
   itself and R providers in float64 and write it back (``Combo.aggregate``).

Both run the strategies' own functions on a real ``Client`` with hand-built inboxes.
Bytes are per worker and round, counted with ``wire_size`` on the messages themselves
(Combo's are checked against the closed form of ``decent/strategies/combo.py``).

    python benchmarks/combo_segments.py [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import torch

from decent.core.graph import RoundGraph
from decent.core.messages import Message, wire_size
from decent.models import params
from decent.models.causal_lm import CausalLMConfig, build_causal_lm
from decent.strategies.base import Client, PhaseContext, Strategy
from decent.strategies.combo import (
    PULL,
    SEGMENT,
    Combo,
    ComboConfig,
    ComboState,
    request_peers,
    segment_bounds,
)
from decent.strategies.gossip import average_with_neighbours
from decent.tasks.base import ClientData, Task
from decent.topologies import TopologyConfig, build_topology

SETTINGS = ((1, 2), (4, 2), (10, 2))  # (S, R)
N_COMPLETE = 21  # S·R ≤ n − 1 for every setting: each request goes to a different peer
OWN_SIZE = 1000  # |D_i|; the providers' sizes differ so that the weights matter
PROVIDER_SIZES = (900, 1100)
REQUEST_BYTES, HEADER_BYTES = 8, 12  # (round, segment) and (round, segment, |D_j|), int32
# Neither phase reads the task: the local steps, the only user of it, are not timed.
NO_TASK = cast(Task, None)


def shard(size: int) -> ClientData:
    """A data shard of ``size`` samples: Combo only reads its length (the |D_i| weight)."""
    return ClientData(x=torch.zeros(size, 1), y=torch.zeros(size, dtype=torch.long))


def perturbed(flat: torch.Tensor, seed: int) -> torch.Tensor:
    """A neighbour's model: the worker's own plus small noise, so that no average is a
    no-op and no sum is of equal values."""
    gen = torch.Generator().manual_seed(seed)
    return flat + 1e-3 * torch.randn(flat.shape, generator=gen)


def as_named(model: torch.nn.Module, flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """``flat`` cut into the model's trainable tensors (views, no copy): the name → tensor
    payload a DSGD neighbour sends."""
    out, offset = {}, 0
    for name, p in params.trainable_params(model).items():
        out[name] = flat[offset:offset + p.numel()].view(p.shape)
        offset += p.numel()
    return out


def dsgd_round(client: Client[Any], received: list[torch.Tensor]
               ) -> tuple[Callable[[], list[float]], int, int]:
    """One DSGD gossip for the ring's worker 0 (a callable returning its seconds), and its
    bytes in/out."""
    graph = build_topology(TopologyConfig(name="ring", n=8)).round_graph(0)
    ctx = PhaseContext(round=0, phase="gossip", step=1, graph=graph, task=NO_TASK)
    inbox = [Message(j, client.cid, "params", as_named(client.model, flat), sent_round=0)
             for j, flat in zip(graph.neighbors[client.cid], received, strict=True)]
    # Metropolis weights on a ring: 1/3 for the worker and each of its two neighbours.
    assert all(math.isclose(w, 1 / 3) for w in graph.weights[client.cid].values())

    def one_round() -> list[float]:
        # What DSGD.local sends after its steps, then DSGD.gossip.
        t0 = time.perf_counter()
        Strategy.to_neighbours(client, ctx, "params", params.snapshot(client.model))
        average_with_neighbours(client, inbox, ctx)
        return [math.nan] * 3 + [time.perf_counter() - t0]

    out = Strategy.to_neighbours(client, ctx, "params", params.snapshot(client.model))
    return one_round, sum(wire_size(m.payload) for m in inbox), sum(wire_size(m.payload)
                                                                    for m in out)


def combo_round(client: Client[ComboState], received: list[torch.Tensor], segments: int,
                replicas: int) -> tuple[Callable[[], list[float]], int, int]:
    """One Combo round's segment handling for worker 0 on the complete graph (a callable
    returning the seconds of flatten, serve, aggregate and their total), and its bytes
    in/out."""
    topology = build_topology(TopologyConfig(name="complete", n=N_COMPLETE))
    graph: RoundGraph = topology.round_graph(0)
    combo = Combo(ComboConfig(segments=segments, replicas=replicas), topology.facts())
    state = combo.init_state(client, None)
    phases = combo.phases(0)
    serve_ctx = PhaseContext(round=0, phase="serve", step=phases.index("serve"), graph=graph,
                             task=NO_TASK)
    agg_ctx = PhaseContext(round=0, phase="aggregate", step=len(phases) - 1, graph=graph,
                           task=NO_TASK)
    d = received[0].numel()
    bounds = segment_bounds(d, segments)
    # The pull schedule Combo.local draws (a permutation of every other worker): the
    # providers this worker asks, and, by symmetry, the peers that ask it.
    order = list(graph.neighbors[client.cid])
    perm = torch.randperm(len(order), generator=client.generator).tolist()
    asked = request_peers([order[k] for k in perm], segments, replicas)
    requests_out = [Combo._request(client.cid, j, seg, 0) for seg, peers in enumerate(asked)
                    for j in peers]
    requests_in = [Message(j, client.cid, PULL, np.array([0, seg], dtype=np.int32),
                           sent_round=0) for seg, peers in enumerate(asked) for j in peers]
    # Replica r of every segment comes from received[r]: contiguous slices, as the copies
    # a provider's serve sends are.
    replies = [Message(j, client.cid, SEGMENT, {
        "values": received[r][lo:hi],
        "header": np.array([0, seg, PROVIDER_SIZES[r % len(PROVIDER_SIZES)]], dtype=np.int32)},
        sent_round=0)
        for seg, (lo, hi) in enumerate(bounds) for r, j in enumerate(asked[seg])]

    def one_round() -> list[float]:
        client.state = state  # the worker is shared by every row: this row's state
        t0 = time.perf_counter()
        # The part of Combo.local that follows the local steps and touches the model.
        state.flat = params.flat_tensor(client.model)
        state.asked = [list(peers) for peers in asked]
        state.got = [{} for _ in range(segments)]
        t1 = time.perf_counter()
        served = combo.serve(client, requests_in, serve_ctx)
        t2 = time.perf_counter()
        combo.aggregate(client, replies, agg_ctx)
        t3 = time.perf_counter()
        assert state.providers == [tuple(sorted(peers)) for peers in asked]
        assert len(served) == segments * replicas
        return [t1 - t0, t2 - t1, t3 - t2, t3 - t0]

    client.state = state
    state.flat = params.flat_tensor(client.model)
    state.got = [{} for _ in range(segments)]
    served = combo.serve(client, requests_in, serve_ctx)
    state.flat = None
    bytes_in = sum(wire_size(m.payload) for m in replies + requests_in)
    bytes_out = sum(wire_size(m.payload) for m in served + requests_out)
    # The closed form: S·R requests of 8 bytes, and R copies of the model's 4·d bytes in
    # S·R replies with a 12-byte header each, in both directions.
    closed = replicas * 4 * d + segments * replicas * (REQUEST_BYTES + HEADER_BYTES)
    assert bytes_in == bytes_out == closed, (bytes_in, bytes_out, closed)
    return one_round, bytes_in, bytes_out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    model = build_causal_lm(CausalLMConfig(), {})
    own = params.flat_tensor(model)
    d = own.numel()
    # Two received models, shared by both methods: DSGD's two neighbours, and Combo's R = 2
    # providers of every segment (a few model-size copies in all, not one per peer).
    received = [perturbed(own, seed) for seed in (1, 2)]
    del own
    client: Client[Any] = Client(cid=0, model=model, data=shard(OWN_SIZE),
                                 device=torch.device("cpu"),
                                 generator=torch.Generator().manual_seed(0))

    print(f"SmolLM2-135M shapes: d = {d:,} trainable fp32 values, one worker's message "
          f"handling per round (no local steps), median of {args.repeats} alternating repeats, "
          f"{args.threads} threads")
    cases = [("dsgd ring", *dsgd_round(client, received))]
    for segments, replicas in SETTINGS:
        cases.append((f"combo S={segments} R={replicas}",
                      *combo_round(client, received, segments, replicas)))
    # The cases alternate within every repeat, so a slow spell of this shared machine
    # hits all of them alike; medians per case.
    times: list[list[list[float]]] = [[] for _ in cases]
    for _ in range(args.repeats):
        for k, (_, one_round, _, _) in enumerate(cases):
            times[k].append(one_round())
    medians = [[statistics.median(t[j] for t in case) for j in range(4)] for case in times]
    t_dsgd = medians[0][3]
    rows = [(label, med, b_in, b_out)
            for (label, _, b_in, b_out), med in zip(cases, medians, strict=True)]

    print(f"{'method':>16} {'s/round':>8} {'/dsgd':>6} {'flatten':>8} {'serve':>7} "
          f"{'aggregate':>9} {'bytes in':>14} {'bytes out':>14}")
    for label, (flat_s, serve_s, agg_s, total), b_in, b_out in rows:
        split = (f"{'-':>8} {'-':>7} {'-':>9}" if np.isnan(flat_s)
                 else f"{flat_s:>8.3f} {serve_s:>7.3f} {agg_s:>9.3f}")
        print(f"{label:>16} {total:>8.3f} {total / t_dsgd:>6.2f} {split} {b_in:>14,} "
              f"{b_out:>14,}")


if __name__ == "__main__":
    main()
