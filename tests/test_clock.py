"""The simulated clock: the max-min fair flow solver against hand-computed cases and an
exact reference, the bottleneck closed form, per-link draws and files, compute time, and
time-to-target."""

from __future__ import annotations

import json
from fractions import Fraction

import numpy as np
import pytest

from decent.core.errors import ConfigError
from decent.engine.config import from_dict
from decent.network.flows import FlowSet, fair_rates, finish_times
from decent.network.timing import Network, NetworkConfig, Spread
from decent.run.runner import run
from decent.tools.cli import main
from tests.helpers import tiny

INF = np.inf


def flows(bits, uses, capacity, release=None) -> FlowSet:
    bits = np.asarray(bits, dtype=float)
    return FlowSet(bits, np.zeros(len(bits)) if release is None else np.asarray(release, float),
                   np.asarray(uses), np.asarray(capacity, dtype=float))


# ---------------------------------------------------------------- hand-computed cases
def test_one_flow_takes_size_over_its_smallest_cap():
    # link 10, uplink 100, downlink 5 bit/s: 10 bits take 2 s
    assert finish_times(flows([10], [[0, 1, 2]], [10, 100, 5]))[0] == pytest.approx(2.0)


def test_k_flows_out_of_one_node_share_its_cap():
    f = flows([30, 30, 30], [[0, 3], [1, 3], [2, 3]], [100, 100, 100, 90])
    np.testing.assert_allclose(fair_rates(np.ones(3, bool), f.uses, f.capacity), [30, 30, 30])
    np.testing.assert_allclose(finish_times(f), [1, 1, 1])


def test_a_flow_limited_on_its_link_frees_node_capacity_for_the_others():
    # uplink 100; flow 0's own link carries 10, so the other two share the remaining 90
    f = flows([10, 45, 45], [[0, 3], [1, 3], [2, 3]], [10, 100, 100, 100])
    np.testing.assert_allclose(fair_rates(np.ones(3, bool), f.uses, f.capacity), [10, 45, 45])
    np.testing.assert_allclose(finish_times(f), [1, 1, 1])


def test_a_finished_flow_hands_its_share_to_the_others():
    # sizes 1 and 3 on a shared uplink of 2: 1 bit/s each until t = 1, then 2 bit/s
    np.testing.assert_allclose(finish_times(flows([1, 3], [[0, 2], [1, 2]], [INF, INF, 2])),
                               [1, 2])


def test_a_flow_starts_when_its_sender_has_computed():
    f = flows([2, 2], [[0, 2], [1, 2]], [INF, INF, 2], release=[0, 1])
    np.testing.assert_allclose(finish_times(f), [1, 2])


# ---------------------------------------------------------------- exact reference
def reference_finish(bits, release, uses, capacity) -> list[Fraction]:
    """Event-by-event max-min sharing in exact rationals, written independently: at each
    event, the fair rates come from repeatedly finding the most constrained resource
    (smallest remaining capacity per unfixed flow) and fixing its flows at that share."""
    n = len(bits)
    left = [Fraction(b) for b in bits]
    rel = [Fraction(r) for r in release]
    finish: list[Fraction | None] = [None] * n
    t = min(rel)
    while any(f is None for f in finish):
        active = [f for f in range(n) if finish[f] is None and rel[f] <= t]
        if not active:
            t = min(rel[f] for f in range(n) if finish[f] is None)
            continue
        rate: dict[int, Fraction] = {}
        cap = {r: Fraction(c) for r, c in enumerate(capacity)}
        while len(rate) < len(active):
            best = None
            for r in cap:
                users = [f for f in active if f not in rate and r in uses[f]]
                if users:
                    share = cap[r] / len(users)
                    if best is None or share < best[0]:
                        best = (share, users)
            share, users = best
            for f in users:
                rate[f] = share
                for r in uses[f]:
                    cap[r] -= share
        waiting = [rel[f] - t for f in range(n) if finish[f] is None and rel[f] > t]
        dt = min([left[f] / rate[f] for f in active] + waiting)
        for f in active:
            left[f] -= rate[f] * dt
        t += dt
        for f in active:
            if left[f] == 0:
                finish[f] = t
    return finish  # type: ignore[return-value]


@pytest.mark.parametrize("seed", range(12))
def test_solver_matches_an_exact_reference_on_random_phases(seed):
    rng = np.random.default_rng(seed)
    n_flows, n_res = int(rng.integers(1, 7)), int(rng.integers(2, 6))
    capacity = rng.integers(1, 10, n_res).tolist()
    uses = [sorted(set(rng.choice(n_res, size=int(rng.integers(1, 4))).tolist()))
            for _ in range(n_flows)]
    bits = rng.integers(1, 20, n_flows).tolist()
    release = rng.integers(0, 3, n_flows).tolist()
    padded = np.full((n_flows, 3), -1)
    for f, u in enumerate(uses):
        padded[f, : len(u)] = u
    got = finish_times(flows(bits, padded, capacity, release))
    want = reference_finish(bits, release, uses, capacity)
    np.testing.assert_allclose(got, [float(x) for x in want], rtol=1e-9)


# ---------------------------------------------------------------- the closed form
def ring_phase(n: int, nbytes: int) -> dict[tuple[int, int], int]:
    return {(i, (i + d) % n): nbytes for i in range(n) for d in (1, -1)}


def test_maxmin_equals_the_bottleneck_formula_on_a_symmetric_phase():
    edges = ring_phase(8, 125_000)
    for node_mbps in (None, 1.0, 100.0):
        cfg = dict(link_mbps=2.0, node_mbps=node_mbps, latency_ms=3.0)
        fair = Network(NetworkConfig(model="maxmin", **cfg), 8, 0).phase_time(edges)
        closed = Network(NetworkConfig(model="bottleneck", **cfg), 8, 0).phase_time(edges)
        assert fair == pytest.approx(closed, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_bottleneck_formula_is_a_lower_bound_of_maxmin(seed):
    rng = np.random.default_rng(seed)
    n = 6
    edges = {(int(i), int(j)): int(rng.integers(1, 10**6))
             for i, j in rng.integers(0, n, (12, 2)) if i != j}
    cfg = dict(link_mbps=5.0, up_mbps=8.0, down_mbps=6.0,
               link_spread=Spread(dist="uniform", low=0.5, high=2.0))
    fair, _ = Network(NetworkConfig(model="maxmin", **cfg), n, 1).phase_time(edges)
    closed, _ = Network(NetworkConfig(model="bottleneck", **cfg), n, 1).phase_time(edges)
    assert fair >= closed * (1 - 1e-12)


# ---------------------------------------------------------------- links and nodes
def test_link_draws_are_symmetric_seeded_and_within_their_range():
    cfg = NetworkConfig(link_mbps=10, latency_ms=20,
                        link_spread=Spread(dist="uniform", low=0.5, high=2.0),
                        latency_spread=Spread(dist="lognormal", sigma=0.5))
    a, b = Network(cfg, 8, 3), Network(cfg, 8, 3)
    caps = []
    for i in range(8):
        for j in range(8):
            if i != j:
                assert a.link(i, j) == a.link(j, i) == b.link(j, i)
                caps.append(a.link(i, j)[0])
    assert 5e6 <= min(caps) < max(caps) <= 20e6
    assert Network(cfg, 8, 4).link(0, 1) != a.link(0, 1)


def test_links_and_nodes_from_csv_files(tmp_path):
    (tmp_path / "links.csv").write_text("src,dst,mbps,latency_ms\n0,1,8,\n2,1,,50\n")
    (tmp_path / "nodes.csv").write_text("node,up_mbps,down_mbps\n1,4,\n")
    net = Network(NetworkConfig(link_mbps=100, latency_ms=1, links_csv=str(tmp_path / "links.csv"),
                                nodes_csv=str(tmp_path / "nodes.csv")), 3, 0)
    assert net.link(1, 0) == (8e6, 1e-3)
    assert net.link(1, 2) == (100e6, 0.05)
    assert net.up[1] == 4e6 and net.down[1] == np.inf
    # 1 MB from node 1 (uplink 4 Mbps) to 0: 2 s, + 1 ms
    assert net.phase_time({(1, 0): 1_000_000})[0] == pytest.approx(2.001)


@pytest.mark.parametrize(("body", "text"), [
    ("src,dst,mbps,latency_ms\n0,9,1,1\n", "client 9 does not exist"),
    ("src,dst,mbps,latency_ms\n0,1,fast,1\n", "is not a number"),
    ("src,dst,mbps,latency_ms\n0,1,-3,1\n", "must be > 0"),
    ("a,b\n1,2\n", "header row"),
])
def test_a_bad_links_file_is_one_line_before_anything_runs(tmp_path, capsys, body, text):
    path = tmp_path / "links.csv"
    path.write_text(body)
    cfg = tiny(tmp_path)
    (tmp_path / "cfg.json").write_text(json.dumps(cfg))
    code = main(["run", str(tmp_path / "cfg.json"), f"network.links_csv={path}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: network.links_csv") and text in err
    assert not (tmp_path / "runs").exists()


# ---------------------------------------------------------------- compute time
def test_a_slow_client_delays_its_messages_on_the_critical_path():
    net = Network(NetworkConfig(link_mbps=8.0), 3, 0)  # 1 MB/s per link
    duration, compute = net.phase_time({(0, 1): 1_000_000, (2, 1): 1_000_000},
                                       {0: 0.5, 1: 0.0, 2: 3.0})
    assert compute == 3.0  # the slowest client
    assert duration == pytest.approx(4.0)  # client 2's message leaves at 3 s, takes 1 s


def test_modelled_compute_charges_steps_at_the_slowest_clients_speed(tmp_path):
    speeds = [1.0, 0.5, 2.0, 1.0]
    cfg = from_dict(tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 4},
                         strategy={"name": "dsgd", "local_steps": 3, "batch_size": 8},
                         compute={"mode": "modelled", "flops_per_step": 2e9,
                                  "device_tflops": 0.001, "speeds": speeds}))
    rows = run(cfg).rows
    # the local phase: 3 steps × 2e9 FLOPs / (1e9 FLOP/s × 0.5) at the slowest client = 12 s;
    # the gossip phase takes no steps
    for row in rows:
        assert row["sim_compute_s"] == pytest.approx(12.0)
        assert row["sim_time_s"] == pytest.approx(row["sim_compute_s"] + row["sim_comm_s"])
    # the parameters leave after the compute: comm as in a run without compute time
    free = run(from_dict(tiny(tmp_path, rounds=3, topology={"name": "ring", "n": 4},
                              strategy={"name": "dsgd", "local_steps": 3, "batch_size": 8})))
    for row, clean in zip(rows, free.rows, strict=True):
        assert clean["sim_compute_s"] == 0.0
        assert row["sim_comm_s"] == pytest.approx(clean["sim_time_s"])


def test_default_flops_per_step_is_six_n_b(tmp_path):
    from decent.engine.compute import ComputeConfig, charged_step_flops
    from decent.strategies.registry import STRATEGIES

    strategy_cfg = STRATEGIES.config({"name": "dsgd", "batch_size": 8})
    assert charged_step_flops(ComputeConfig(), 1000, strategy_cfg)[0] == 6 * 1000 * 8


def test_measured_compute_is_the_wall_time_of_the_phase(tmp_path):
    measured = run(from_dict(tiny(tmp_path, rounds=2, compute={"mode": "measured"}))).rows
    assert all(r["sim_compute_s"] > 0 for r in measured)


def test_speeds_need_one_factor_per_client(tmp_path):
    with pytest.raises(ConfigError) as err:
        from_dict(tiny(tmp_path, topology={"name": "ring", "n": 4},
                       compute={"mode": "modelled", "speeds": [1.0, 2.0]}))
    assert err.value.field == "compute.speeds"


# ---------------------------------------------------------------- time to target
def test_time_to_target_is_the_clock_at_the_first_evaluation_that_reaches_it(tmp_path):
    cfg = tiny(tmp_path, rounds=6, eval={"every": 1, "per_client": False})
    rows = run(from_dict(cfg)).rows
    target = rows[3]["gmp_accuracy"]  # a value the run reaches by its fourth round
    cfg["eval"]["target"] = {"metric": "gmp_accuracy", "value": target}
    result = run(from_dict(cfg))
    hit = next(r for r in rows if r["gmp_accuracy"] >= target)
    assert result.summary["time_to_target_s"] == hit["sim_time_total_s"]
    assert result.summary["rounds_to_target"] == hit["round"] + 1
    cfg["eval"]["target"]["value"] = 1.01  # never reached
    never = run(from_dict(cfg)).summary
    assert never["time_to_target_s"] is None and never["rounds_to_target"] is None


def test_a_loss_target_is_reached_from_above(tmp_path):
    cfg = tiny(tmp_path, rounds=4, eval={"every": 1, "per_client": False,
                                         "target": {"metric": "gmp_loss", "value": 10.0}})
    assert run(from_dict(cfg)).summary["rounds_to_target"] == 1  # auto: lower is better


def test_an_unknown_target_metric_is_refused_with_the_choices(tmp_path, capsys):
    (tmp_path / "cfg.json").write_text(json.dumps(tiny(tmp_path)))
    code = main(["run", str(tmp_path / "cfg.json"), "eval.target.metric=gmp_perplexity"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("error: eval.target.metric") and "gmp_accuracy" in err
