"""The strategy contract v3: phases declared as data, roles, the Inbox filters, the
shared-tensor descriptor and the toolkit — and a method written with it alone (gradient
tracking) that runs, resumes bit for bit and matches an independent reference."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from decent.core.errors import StrategyError
from decent.core.graph import GraphFacts
from decent.core.messages import Message
from decent.core.schema import at_least, positive
from decent.engine.config import from_dict
from decent.engine.group import ClientGroup, build_task
from decent.engine.plan import build_plan
from decent.models import params
from decent.models.registry import MODELS
from decent.run.runner import resume, run
from decent.strategies.base import Client, PhaseContext, SharedTensors, Strategy
from decent.strategies.config import StrategyConfig
from decent.strategies.fedavg import FedAvg
from decent.strategies.inbox import Inbox
from decent.strategies.phases import SERVER, WORKER, phase
from decent.strategies.registry import STRATEGIES
from decent.strategies.toolkit import (
    mix_with_neighbours,
    shard_batches,
    shard_gradient,
    stochastic_gradient,
)
from decent.tasks.base import ClientData, Task
from decent.topologies import TopologyConfig, build_topology
from tests.helpers import method_config, rows_and_vectors, run_capturing, tiny


# ---------------------------------------------------------------- phases as data
@dataclass
class NoConfig:
    name: str = "t"


def ring(n: int) -> GraphFacts:
    return GraphFacts(name="ring", n=n, time_varying=False, diameter=n // 2,
                      degrees=(2,) * n)


def test_a_schedule_naming_an_undeclared_phase_is_refused_in_one_line_when_built():
    class Typo(Strategy[None]):
        name = "typo"

        def phases(self, round_: int) -> tuple[str, ...]:
            return ("local", "gosip")

        @phase()
        def local(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...

        def gossip(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...  # not marked

    with pytest.raises(StrategyError) as err:
        Typo(NoConfig(), ring(4))
    assert "phase 'gosip' is not declared (declared: local)" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_helper_is_not_a_phase_and_bad_declarations_fail_at_class_definition():
    class Plain(Strategy[None]):
        name = "plain"

        @phase()
        def local(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...

        def helper(self) -> None: ...

    strategy = Plain(NoConfig(), ring(4))
    assert strategy.phases(0) == ("local",)  # the declared phases, in order
    with pytest.raises(StrategyError, match="phase 'helper' is not declared"):
        strategy.phase_method("helper", 0)
    with pytest.raises(StrategyError, match="role 'sever'"):
        class BadRole(Strategy[None]):
            name = "bad"

            @phase(role="sever")
            def local(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...
    with pytest.raises(StrategyError, match="declared twice"):
        class Twice(Strategy[None]):
            name = "twice"

            @phase("local")
            def one(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...

            @phase("local")
            def two(self, client: Any, inbox: Inbox, ctx: Any) -> None: ...


def test_the_engine_calls_a_phase_only_for_the_clients_of_its_role(tmp_path, monkeypatch):
    calls: dict[str, list[int]] = {"local": [], "aggregate": [], "sync": []}
    for name in calls:
        original = getattr(FedAvg, name)

        def counting(self, client, inbox, ctx, original=original, name=name):
            calls[name].append(client.cid)
            return original(self, client, inbox, ctx)

        monkeypatch.setattr(FedAvg, name, counting)
    cfg = from_dict(tiny(tmp_path, rounds=2, topology={"name": "star", "n": 5},
                         strategy={"name": "fedavg", "local_steps": 1, "batch_size": 4}))
    strategy = build_plan(cfg).strategy
    assert [strategy.role(c) for c in range(5)] == [SERVER] + [WORKER] * 4
    assert strategy.data_holders() == [1, 2, 3, 4]
    assert strategy.phase_method("aggregate", 1) is None
    run(cfg)
    assert calls["aggregate"] == [0, 0]
    assert calls["local"] == calls["sync"] == [1, 2, 3, 4] * 2


# ---------------------------------------------------------------- the inbox
def msg(src: int, tag: str = "m", round_: int = 3, phase_: int = 0, **kw: Any) -> Message:
    return Message(src, kw.pop("dst", 0), tag, src, sent_round=round_, sent_phase=phase_,
                   **kw)


def test_the_inbox_filters_hand_made_messages_exactly():
    late, fresh = msg(1, round_=2, phase_=5), msg(1, phase_=7)
    lost = msg(0, dst=2, undeliverable=True)  # its own, bounced
    stranger = msg(5)  # no neighbour this round
    other_tag = msg(3, tag="other")
    gone = msg(3, undeliverable=True)
    inbox = Inbox([lost, late, fresh, other_tag, gone, stranger], cid=0, round_=3,
                  neighbours=(1, 3))
    assert list(inbox) == [lost, late, fresh, other_tag, gone, stranger]
    assert inbox.newest() == {1: fresh, 3: other_tag}
    assert list(inbox.newest()) == [1, 3]  # source order
    assert inbox.newest("m") == {1: fresh}
    assert inbox.fresh() == [fresh, other_tag, stranger]
    assert inbox.fresh("m") == [fresh, stranger]
    assert inbox.bounced() == [lost]
    assert inbox.delivered("m") == [late, fresh, stranger]


# ---------------------------------------------------------------- shared tensors
def test_the_shared_tensor_descriptor_of_each_method(tmp_path):
    assert SharedTensors().frozen == "read_only" and list(SharedTensors()) == []
    with pytest.raises(StrategyError, match="read_only"):
        SharedTensors(frozen="readonly")
    flood = STRATEGIES.entry("seedflood")
    refreshing = flood.build(STRATEGIES.config({"name": "seedflood", "refresh_every": 2}),
                             ring(4))
    assert refreshing.shared_tensors(None).frozen == "written"
    assert flood.build(STRATEGIES.config({"name": "seedflood"}),
                       ring(4)).shared_tensors(None).frozen == "read_only"
    # SPES: its process object holds the frozen experts, once; none is mapped
    cfg = from_dict(method_config(tmp_path, "spes", 3))
    group = ClientGroup(cfg, [0, 1, 2], torch.device("cpu"), build_plan(cfg))
    sharing = group.strategy.shared_tensors(group.shared)
    held = {t.data_ptr() for t in sharing.tensors}
    assert held and sharing.relink is not None and sharing.frozen == "private"
    assert group.shareable() == {}
    worker = group.clients[1]
    own = {t.data_ptr() for t in group.private_tensors(worker).values()}
    frozen = {p.data_ptr() for p in worker.model.parameters() if not p.requires_grad}
    assert frozen and frozen <= held and not own & held


# ---------------------------------------------------------------- the toolkit
class Regression(Task):
    name = "regression"

    def model_spec(self) -> dict[str, Any]:
        return {}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        return {}

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        x, y = batch
        return ((model(x).squeeze(-1) - y) ** 2).mean()

    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        return {"loss": 0.0}


def tiny_client(examples: int = 10) -> Client[Any]:
    torch.manual_seed(0)
    data = ClientData(torch.randn(examples, 3), torch.randn(examples))
    return Client(cid=0, model=torch.nn.Linear(3, 1), data=data, device=torch.device("cpu"),
                  generator=torch.Generator().manual_seed(7), task=Regression())


def test_one_stochastic_gradient_is_autograd_by_hand():
    client, task = tiny_client(), Regression()
    loss, grads = stochastic_gradient(client, task, 4)
    batch = client.data.sample(4, torch.Generator().manual_seed(7))  # the same draw
    by_hand = task.loss(client.model, batch)
    expect = torch.autograd.grad(by_hand, list(client.model.parameters()))
    assert loss == float(by_hand.detach())
    for (name, g), e in zip(grads.items(), expect, strict=True):
        assert torch.equal(g, e), name
    assert client.steps == 1 and all(p.grad is None for p in client.model.parameters())


def test_the_shard_is_visited_once_in_order_without_drawing_rng():
    data = ClientData(torch.arange(10.0)[:, None], torch.arange(10.0))
    generator = torch.Generator().manual_seed(3)
    before = generator.get_state()
    seen = [int(v) for batch in shard_batches(data, 4) for v in batch[1]]
    assert seen == list(range(10))
    assert [len(b[1]) for b in shard_batches(data, 4)] == [4, 4, 2]
    assert torch.equal(generator.get_state(), before)
    client, task = tiny_client(), Regression()
    loss, grads = shard_gradient(client, task, 4)
    whole = task.loss(client.model, (client.data.x, client.data.y))
    expect = torch.autograd.grad(whole, list(client.model.parameters()))
    assert loss == pytest.approx(float(whole.detach()), rel=1e-6)
    for g, e in zip(grads.values(), expect, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-7)
    assert client.steps == 3  # one per batch


def test_shard_batches_walks_a_token_shard_and_forms_batches_as_sample_does():
    """A shard that forms its own batches (token sequences: inputs only) is walked through
    the same ``rows`` its random draws use."""
    from decent.tasks.language_modeling import SequenceData

    seqs = torch.arange(30).reshape(10, 3)
    data = SequenceData(seqs, torch.zeros(10))
    batches = list(shard_batches(data, 4))
    assert [len(b) for b in batches] == [1, 1, 1]  # inputs only
    assert torch.equal(torch.cat([b[0] for b in batches]), seqs)
    drawn = data.sample(5, torch.Generator().manual_seed(0))
    idx = torch.randint(10, (5,), generator=torch.Generator().manual_seed(0))
    assert len(drawn) == 1 and torch.equal(drawn[0], seqs[idx])


def test_mixing_any_state_tensor_is_the_weighted_sum_by_hand():
    graph = build_topology(TopologyConfig(name="ring", n=4)).round_graph(0)
    ctx = PhaseContext(round=0, phase="mix", step=1, graph=graph, task=Regression())
    client = tiny_client()
    w = graph.weights[0]  # neighbours 1 and 3; 3's message was lost, 1's came twice
    own = {"y": torch.tensor([1.0, 2.0])}
    stale = {"x": {}, "y": {"y": torch.tensor([9.0, 9.0])}}
    new = {"x": {}, "y": {"y": torch.tensor([4.0, -2.0], dtype=torch.bfloat16)}}
    inbox = Inbox([Message(1, 0, "xy", stale, sent_round=0, sent_phase=0),
                   Message(1, 0, "xy", new, sent_round=0, sent_phase=1)], 0, 0, (1, 3))
    mixed = mix_with_neighbours(client, own, inbox, ctx, part="y")
    expect = (w[0] + w[3]) * own["y"] + w[1] * torch.tensor([4.0, -2.0])
    assert torch.equal(mixed["y"], expect)
    assert torch.equal(own["y"], torch.tensor([1.0, 2.0]))  # not written


# ---------------------------------------------------------------- a method from the toolkit
@dataclass
class GTConfig(StrategyConfig):
    name: str = "gradient_tracking"
    lr: float = positive(0.1)  # α
    batch_size: int = at_least(1, 64)  # batches of the full local gradient

    def examples_per_step(self) -> int:
        return self.batch_size


@dataclass
class GTState:
    y: dict[str, torch.Tensor]  # the tracker of the mean gradient
    g: dict[str, torch.Tensor]  # ∇f_i at the current x_i


class GradientTracking(Strategy[GTState]):
    """DIGing (Nedić, Olshevsky & Shi 2017; Pu & Nedić): x ← W x − α y;
    y ← W y + ∇f(x_new) − ∇f(x_old); y⁰ = ∇f_i(x⁰)."""

    name = "gradient_tracking"
    Config = GTConfig
    State = GTState

    def init_state(self, client: Client[GTState], shared: Any) -> GTState:
        _, g = shard_gradient(client, client.task, self.cfg.batch_size)
        return GTState(y={n: t.clone() for n, t in g.items()}, g=g)

    @phase()
    def send(self, client: Client[GTState], inbox: Inbox, ctx: PhaseContext) -> list[Message]:
        payload = {"x": params.snapshot(client.model), "y": client.state.y}
        return self.to_neighbours(client, ctx, "xy", payload)

    @phase()
    def update(self, client: Client[GTState], inbox: Inbox, ctx: PhaseContext) -> None:
        state = client.state
        x = mix_with_neighbours(client, params.trainable_params(client.model), inbox, ctx,
                                part="x")
        y = mix_with_neighbours(client, state.y, inbox, ctx, part="y")
        with torch.no_grad():
            params.load(client.model, {n: x[n] - self.cfg.lr * state.y[n] for n in x})
        client.stats["loss"], g = shard_gradient(client, ctx.task, self.cfg.batch_size)
        state.y = {n: y[n] + g[n] - state.g[n] for n in g}
        state.g = g


@pytest.fixture()
def gradient_tracking(monkeypatch):
    # registered as a method is (its State becomes storable), forgotten after the test
    monkeypatch.setattr(STRATEGIES, "_entries", dict(STRATEGIES._entries))
    STRATEGIES.register(GradientTracking.name, GTConfig, GradientTracking)


def gt_config(tmp_path, **sections):
    return tiny(tmp_path, rounds=6, topology={"name": "ring", "n": 4},
                strategy={"name": "gradient_tracking", "lr": 0.2},
                model={"name": "mlp", "hidden": []}, **sections)


def reference(cfg: Any) -> np.ndarray:
    """The same recursion, stacked over clients in float64 numpy, with each full local
    gradient taken in one batch by torch.func."""
    plan, task = build_plan(cfg), build_task(cfg)
    n = cfg.n
    shards = task.client_data(list(range(n)), torch.device("cpu"))
    torch.manual_seed(cfg.seed)
    model = MODELS.entry(cfg.model.name).build(cfg.model, task.model_spec())
    names = [name for name, p in model.named_parameters()]
    shapes = [p.shape for p in model.parameters()]

    def grad(i: int, x: np.ndarray) -> np.ndarray:
        values, at = {}, 0
        for name, shape in zip(names, shapes, strict=True):
            size = int(np.prod(shape))
            values[name] = torch.tensor(x[at:at + size], dtype=torch.float32).reshape(shape)
            values[name].requires_grad_(True)
            at += size

        class Bound(torch.nn.Module):
            def forward(self, inputs: torch.Tensor) -> torch.Tensor:
                return torch.func.functional_call(model, values, (inputs,))

        data = shards[i]
        loss = task.loss(Bound(), (data.x, data.y))
        return np.concatenate([g.reshape(-1).numpy() for g in torch.autograd.grad(
            loss, [values[k] for k in names])]).astype(np.float64)

    x0 = np.concatenate([p.detach().reshape(-1).numpy() for p in model.parameters()])
    X = np.tile(x0.astype(np.float64), (n, 1))
    G = np.stack([grad(i, X[i]) for i in range(n)])
    Y = G.copy()
    for r in range(cfg.rounds):
        graph = plan.topology.round_graph(r)
        W = np.zeros((n, n))
        for i in range(n):
            for j, w in graph.weights[i].items():
                W[i, j] = w
        X = W @ X - cfg.strategy.lr * Y
        G_new = np.stack([grad(i, X[i]) for i in range(n)])
        Y = W @ Y + G_new - G
        G = G_new
    return X


def test_gradient_tracking_from_the_toolkit_matches_its_reference(tmp_path,
                                                                  gradient_tracking):
    cfg = from_dict(gt_config(tmp_path))
    rows, vectors = rows_and_vectors(cfg)
    expect = reference(cfg)
    for cid, vec in vectors.items():
        np.testing.assert_allclose(vec, expect[cid], rtol=1e-4, atol=1e-5)
    assert rows[-1]["loss"] < rows[0]["loss"]


def test_gradient_tracking_resumes_bit_for_bit(tmp_path, gradient_tracking):
    cfg = from_dict(gt_config(tmp_path, checkpoint={"every": 2},
                              faults={"drop": 0.2}))
    full, full_vectors = run_capturing(run, cfg, cfg)
    stopped = full.run_dir.parent / f".{full.run_dir.name}-killed.partial"
    shutil.copytree(full.run_dir, stopped)
    (stopped / "summary.json").unlink()
    resumed, vectors = run_capturing(resume, cfg, stopped)
    steady = [{k: v for k, v in r.items() if k != "round_wall_s"} for r in full.rows]
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in resumed.rows] == steady
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)
