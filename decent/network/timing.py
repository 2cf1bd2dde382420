"""A simple network model that turns per-edge bytes into simulated transfer time.

Each phase's messages are sent concurrently. A phase lasts as long as its slowest
bottleneck: every directed link carries at most ``link_mbps`` (the pair-wise WAN cap of
the segmented-gossip paper, 10 Mbps there) and every node sends and receives at most
``node_mbps`` each way (its access link, 100 Mbps there); a phase that moves any data
also pays ``latency_ms`` once. A round's simulated time is the sum over its phases.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from decent.core.schema import at_least, positive


@dataclass
class NetworkConfig:
    """Bandwidths in megabits per second; ``node_mbps`` of ``None`` means uncapped."""

    link_mbps: float = positive(100.0)
    node_mbps: float | None = positive(None, nullable=True)
    latency_ms: float = at_least(0, 0.0)


def phase_time(edge_bytes: dict[tuple[int, int], int], net: NetworkConfig) -> float:
    """Simulated seconds to deliver one phase's traffic ``{(src, dst): bytes}``."""
    if not edge_bytes:
        return 0.0
    worst = max(edge_bytes.values()) * 8 / (net.link_mbps * 1e6)
    if net.node_mbps is not None:
        out_bytes: dict[int, int] = defaultdict(int)
        in_bytes: dict[int, int] = defaultdict(int)
        for (src, dst), nbytes in edge_bytes.items():
            out_bytes[src] += nbytes
            in_bytes[dst] += nbytes
        busiest = max(max(out_bytes.values()), max(in_bytes.values()))
        worst = max(worst, busiest * 8 / (net.node_mbps * 1e6))
    return worst + net.latency_ms / 1e3
