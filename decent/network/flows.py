"""Max-min fair bandwidth sharing: when does each flow of a phase finish?

A phase's messages are flows. Each flow crosses a few capacity-limited *resources* — its
directed link, its sender's uplink, its receiver's downlink — and starts when its sender
has finished computing (its *release* time). At every moment the active flows share the
resources max-min fairly, computed by progressive filling (Bertsekas & Gallager, *Data
Networks*, §6.5.2): raise every unfrozen flow's rate at the same pace until a resource is
full, freeze the flows that cross it, repeat with the rest. Whenever a flow finishes or
a new one starts, the allocation is recomputed, so a flow that ends early hands its
share to the others.

Everything is in bits and seconds. The solver is event-driven and vectorised over flows
(numpy); each event costs one progressive filling, whose rounds are bounded by the
number of distinct bottleneck levels.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# A flow whose remaining size is this fraction of its size (or less) has finished: the
# events of flows that finish "together" then coincide despite float rounding.
REL_TOL = 1e-9


@dataclass(frozen=True)
class FlowSet:
    """Flows of one phase.

    ``bits[f]`` to send, starting at ``release[f]`` (s); ``uses[f]`` lists the resource
    ids flow f crosses (-1 pads); ``capacity[r]`` in bit/s (``inf`` = uncapped)."""

    bits: np.ndarray  # (F,) float64
    release: np.ndarray  # (F,) float64
    uses: np.ndarray  # (F, K) int64, -1 = none
    capacity: np.ndarray  # (R,) float64


def fair_rates(active: np.ndarray, uses: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bit/s) of the ``active`` flows by progressive filling; 0 for the
    others. A flow that crosses no finite resource gets ``inf``."""
    n_flows = len(active)
    rate = np.zeros(n_flows)
    unfrozen = active.copy()
    left = capacity.astype(np.float64).copy()
    finite = np.isfinite(left)
    valid = uses >= 0
    while unfrozen.any():
        mask = valid & unfrozen[:, None]
        counts = np.bincount(uses[mask], minlength=len(left)).astype(np.float64)
        contended = finite & (counts > 0)
        if not contended.any():  # the rest cross uncapped resources only
            rate[unfrozen] = np.inf
            break
        share = np.full(len(left), np.inf)
        share[contended] = left[contended] / counts[contended]
        step = share.min()
        rate[unfrozen] += step
        left[contended] -= step * counts[contended]
        full = contended & (left <= REL_TOL * np.where(capacity > 0, capacity, 1.0))
        left[full] = 0.0
        hits = np.zeros(len(left) + 1, dtype=bool)  # last slot: the -1 padding
        hits[:-1] = full
        unfrozen &= ~hits[uses].any(axis=1)
    return rate


def finish_times(flows: FlowSet) -> np.ndarray:
    """The time (s) at which each flow has delivered its last bit."""
    n_flows = len(flows.bits)
    finish = np.full(n_flows, np.inf)
    if n_flows == 0:
        return finish
    remaining = flows.bits.astype(np.float64).copy()
    done = remaining <= 0
    finish[done] = flows.release[done]
    t = float(flows.release.min())
    while not done.all():
        started = flows.release <= t
        active = started & ~done
        waiting = ~started & ~done
        next_release = flows.release[waiting].min() if waiting.any() else np.inf
        if not active.any():
            t = float(next_release)
            continue
        rate = fair_rates(active, flows.uses, flows.capacity)
        need = np.full(n_flows, np.inf)  # seconds to finish at the current rates
        need[active] = remaining[active] / rate[active]
        dt_finish = need[active].min()
        dt = min(dt_finish, next_release - t)
        ending = active & (need <= dt * (1 + REL_TOL))
        if np.isfinite(dt):
            moved = rate[active] * dt
            remaining[active] -= np.where(np.isfinite(moved), moved, remaining[active])
        t += dt
        ending |= active & (remaining <= REL_TOL * flows.bits)
        remaining[ending] = 0.0
        finish[ending] = t
        done |= ending
    return finish
