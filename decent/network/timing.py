"""The network model: what a phase's traffic costs in simulated seconds.

Every directed link (i, j) has a capacity and a latency; every node may also have an
uplink and a downlink cap (its access link: 100 Mbps NICs behind 10 Mbps pair-wise WAN
links in the segmented-gossip paper). Links are symmetric: (i, j) and (j, i) get the same
values. A link's capacity and latency are the configured base values times a factor
drawn once per run for the pair from ``link_spread`` / ``latency_spread`` (seeded), or
read from ``links_csv``; node caps come from ``up_mbps``/``down_mbps`` (``node_mbps``
sets both) or ``nodes_csv``.

A phase is bulk-synchronous: each client computes (its compute time, see
:mod:`decent.engine.compute`), then its messages leave; the phase ends when the slowest
client has computed and the last message has arrived. Two models of the transfer:

* ``maxmin`` (default) — the messages on one directed link form one flow that starts
  when its sender has finished computing; flows share link and node capacity max-min
  fairly (:mod:`decent.network.flows`); a flow is delivered at its finish time plus its
  link's latency;
* ``bottleneck`` — the closed form max(busiest link, busiest node) + the largest latency
  of a used link, after the slowest client's compute; exact when the phase is symmetric,
  a lower bound of ``maxmin`` otherwise.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from decent.core.errors import ConfigError
from decent.core.schema import at_least, one_of, positive, text
from decent.network.flows import FlowSet, finish_times

SPREADS = ("fixed", "uniform", "lognormal")
MODELS = ("maxmin", "bottleneck")
MBPS = 1e6  # bit/s per Mbit/s


@dataclass
class Spread:
    """A factor drawn per item (link, client): 1 (``fixed``), uniform in [low, high], or
    lognormal with median 1 and log-standard deviation ``sigma``."""

    # fixed: every factor 1; uniform in [low, high]; lognormal with median 1
    dist: str = one_of(SPREADS, "fixed")
    low: float = positive(0.5)  # uniform: the smallest factor
    high: float = positive(2.0)  # uniform: the largest factor
    sigma: float = at_least(0, 0.5)  # lognormal: the standard deviation of the factor's logarithm

    def validate(self, prefix: str) -> None:
        if self.dist == "uniform" and self.low > self.high:
            raise ConfigError(f"{prefix}.low", f"must be ≤ {prefix}.high ({self.low} > "
                              f"{self.high})")

    def draw(self, rng: np.random.Generator) -> float:
        if self.dist == "uniform":
            return float(rng.uniform(self.low, self.high))
        if self.dist == "lognormal":
            return float(np.exp(rng.normal(0.0, self.sigma)))
        return 1.0


@dataclass
class NetworkConfig:
    """Bandwidths in megabits per second (``None``: uncapped), latencies in ms."""

    # maxmin: concurrent flows share links max-min fairly; bottleneck: each message at its path's
    # slowest rate
    model: str = one_of(MODELS, "maxmin")
    link_mbps: float = positive(100.0)  # every link's bandwidth in Mbit/s (before link_spread)
    # a factor per link multiplying link_mbps (heterogeneous links)
    link_spread: Spread = field(default_factory=Spread)
    node_mbps: float | None = positive(None, nullable=True)  # up and down, unless set below
    # each client's upload capacity in Mbit/s, shared by its outgoing flows; None: uncapped
    up_mbps: float | None = positive(None, nullable=True)
    # each client's download capacity in Mbit/s, shared by its incoming flows; None: uncapped
    down_mbps: float | None = positive(None, nullable=True)
    # every link's one-way latency in milliseconds (before latency_spread)
    latency_ms: float = at_least(0, 0.0)
    # a factor per link multiplying latency_ms
    latency_spread: Spread = field(default_factory=Spread)
    # rows "src,dst,mbps,latency_ms" (blank = the drawn value), both directions
    links_csv: str | None = text()
    nodes_csv: str | None = text()  # rows "node,up_mbps,down_mbps" (blank = default)

    def validate(self, prefix: str) -> None:
        for name in ("links_csv", "nodes_csv"):
            path = getattr(self, name)
            if path is not None and not Path(path).is_file():
                raise ConfigError(f"{prefix}.{name}", f"file not found: {path}")


def pair_rng(seed: int, salt: int, i: int, j: int) -> np.random.Generator:
    """A generator for the unordered pair {i, j}: the same whichever process asks."""
    lo, hi = min(i, j), max(i, j)
    return np.random.default_rng([seed, salt, lo, hi])


def _number(row: dict[str, str], key: str, where: str) -> float | None:
    raw = (row.get(key) or "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(where, f"{key} {raw!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and key != "latency_ms"):
        raise ConfigError(where, f"{key} must be {'≥' if key == 'latency_ms' else '>'} 0 "
                          f"(got {raw})")
    return value


def _rows(path: str, field_name: str, columns: tuple[str, ...]) -> Iterable[tuple[int, dict]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in columns[:1] if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(field_name, f"{path}: needs a header row with columns "
                              f"{', '.join(columns)}")
        yield from enumerate(reader, start=2)


def _node_id(raw: str | None, n: int, where: str) -> int:
    try:
        node = int((raw or "").strip())
    except ValueError:
        raise ConfigError(where, f"{raw!r} is not a client id") from None
    if not 0 <= node < n:
        raise ConfigError(where, f"client {node} does not exist (ids are 0..{n - 1})")
    return node


class Network:
    """The links and nodes of one run: capacities (bit/s) and latencies (s), drawn or
    read once, and the time of a phase's traffic."""

    SALT_CAP, SALT_LATENCY = 0x6361, 0x6C61  # independent draws for capacity and latency

    def __init__(self, cfg: NetworkConfig, n: int, seed: int) -> None:
        self.cfg = cfg
        self.n = n
        self.seed = seed
        default_up = cfg.up_mbps if cfg.up_mbps is not None else cfg.node_mbps
        default_down = cfg.down_mbps if cfg.down_mbps is not None else cfg.node_mbps
        self.up = np.full(n, np.inf if default_up is None else default_up * MBPS)
        self.down = np.full(n, np.inf if default_down is None else default_down * MBPS)
        self._links: dict[tuple[int, int], tuple[float, float]] = {}
        self._given: dict[tuple[int, int], tuple[float | None, float | None]] = {}
        if cfg.links_csv is not None:
            self._read_links(cfg.links_csv)
        if cfg.nodes_csv is not None:
            self._read_nodes(cfg.nodes_csv)

    def _read_links(self, path: str) -> None:
        for line, row in _rows(path, "network.links_csv", ("src", "dst", "mbps", "latency_ms")):
            where = f"network.links_csv ({path}, line {line})"
            i = _node_id(row.get("src"), self.n, where)
            j = _node_id(row.get("dst"), self.n, where)
            mbps, latency = _number(row, "mbps", where), _number(row, "latency_ms", where)
            self._given[(min(i, j), max(i, j))] = (
                None if mbps is None else mbps * MBPS,
                None if latency is None else latency / 1e3)

    def _read_nodes(self, path: str) -> None:
        for line, row in _rows(path, "network.nodes_csv", ("node", "up_mbps", "down_mbps")):
            where = f"network.nodes_csv ({path}, line {line})"
            node = _node_id(row.get("node"), self.n, where)
            up, down = _number(row, "up_mbps", where), _number(row, "down_mbps", where)
            if up is not None:
                self.up[node] = up * MBPS
            if down is not None:
                self.down[node] = down * MBPS

    def link(self, i: int, j: int) -> tuple[float, float]:
        """(capacity in bit/s, latency in s) of the link between i and j."""
        key = (min(i, j), max(i, j))
        if key not in self._links:
            cfg = self.cfg
            cap = cfg.link_mbps * MBPS * cfg.link_spread.draw(
                pair_rng(self.seed, self.SALT_CAP, *key))
            latency = cfg.latency_ms / 1e3 * cfg.latency_spread.draw(
                pair_rng(self.seed, self.SALT_LATENCY, *key))
            given_cap, given_latency = self._given.get(key, (None, None))
            self._links[key] = (cap if given_cap is None else given_cap,
                                latency if given_latency is None else given_latency)
        return self._links[key]

    # ------------------------------------------------------------------ one phase
    def phase_time(self, edge_bytes: dict[tuple[int, int], int],
                   compute: dict[int, float] | None = None) -> tuple[float, float]:
        """(duration, compute part) in seconds of a phase whose traffic is ``edge_bytes``
        ``{(src, dst): bytes}`` and whose clients computed for ``compute[cid]`` seconds
        before sending. The compute part is the slowest client's compute time; the rest of
        the duration is communication on the critical path."""
        compute = compute or {}
        slowest = max(compute.values(), default=0.0)
        edges = [(e, b) for e, b in edge_bytes.items() if b > 0]
        if not edges:
            return slowest, slowest
        links = [self.link(i, j) for (i, j), _ in edges]
        latency = np.array([lat for _, lat in links])
        bits = np.array([8.0 * b for _, b in edges])
        cap = np.array([c for c, _ in links])
        if self.cfg.model == "bottleneck":
            return slowest + self._bottleneck(edges, bits, cap) + float(latency.max()), slowest
        srcs = np.array([i for (i, _), _ in edges])
        dsts = np.array([j for (_, j), _ in edges])
        n_edges, n = len(edges), self.n
        # resources: one per flow (its link), then n uplinks, then n downlinks
        uses = np.stack([np.arange(n_edges), n_edges + srcs, n_edges + n + dsts], axis=1)
        release = np.array([compute.get(int(i), 0.0) for i in srcs])
        flows = FlowSet(bits, release, uses, np.concatenate([cap, self.up, self.down]))
        arrive = finish_times(flows) + latency
        return max(slowest, float(arrive.max())), slowest

    def _bottleneck(self, edges: list, bits: np.ndarray, cap: np.ndarray) -> float:
        worst = float((bits / cap).max())
        out_bits = np.zeros(self.n)
        in_bits = np.zeros(self.n)
        for ((i, j), _), b in zip(edges, bits, strict=True):
            out_bits[i] += b
            in_bits[j] += b
        with np.errstate(divide="ignore"):
            worst = max(worst, float((out_bits / self.up).max()),
                        float((in_bits / self.down).max()))
        return worst
