"""A group of clients hosted together: what a ClientActor wraps on Ray, and what the
local backend runs with every client in it.

Everything a client computes depends only on the run config, its id and its inbox, so
results do not depend on how clients are grouped or which backend runs them.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from decent.core.errors import StrategyError
from decent.core.messages import Message, wire_size
from decent.core.snapshot import capture, restore
from decent.core.stats import Stat
from decent.engine.blame import blame, check_state
from decent.engine.compute import ComputeClock
from decent.engine.config import RunConfig
from decent.engine.imports import import_plugins
from decent.engine.plan import RunPlan
from decent.engine.stacking import make_batcher
from decent.models.registry import MODELS
from decent.network.faults import ATTACK_SALT, fault_seed
from decent.network.membership import RoundMembers
from decent.robust.attacks import Attack
from decent.strategies.base import Client, PhaseContext
from decent.tasks.base import Task
from decent.tasks.registry import TASKS

# The sequence word of a tampered value's attack seed, apart from every sent message's
TAMPER_SEQ = 2**31 - 1


def resolve_device(cfg: RunConfig, has_gpu: bool | None = None) -> torch.device:
    if cfg.device == "auto":
        use_cuda = torch.cuda.is_available() if has_gpu is None else has_gpu
        return torch.device("cuda" if use_cuda else "cpu")
    return torch.device(cfg.device)


def client_seed(seed: int, cid: int) -> int:
    """An independent 63-bit seed per (run seed, client)."""
    return int(np.random.SeedSequence([seed, cid]).generate_state(2, np.uint64)[0] >> 1)


def replica(base: torch.nn.Module) -> torch.nn.Module:
    """A client's copy of the initial model that shares every frozen parameter with it.

    Frozen tensors (the base weights under LoRA) are identical between clients and never
    written, so the clients of one actor hold them once; only trainable tensors are
    copied."""
    shared = {id(p): p for p in base.parameters() if not p.requires_grad}
    return copy.deepcopy(base, memo=shared)


@contextmanager
def own_rng(client: Client) -> Iterator[None]:
    """Run with torch's global RNG (and the device's) set to the client's own stream.

    Code the strategy does not control draws from the global generators — dropout in
    peft's LoRA layers, for one — so each client keeps its own state of them, and the
    draws do not depend on which other clients ran before it in the same process."""
    cuda = client.device.type == "cuda"
    saved = torch.random.get_rng_state()
    saved_cuda = torch.cuda.get_rng_state(client.device) if cuda else None
    torch.random.set_rng_state(client.rng_states["cpu"])
    if cuda:
        torch.cuda.set_rng_state(client.rng_states["cuda"], client.device)
    try:
        yield
    finally:
        client.rng_states["cpu"] = torch.random.get_rng_state()
        torch.random.set_rng_state(saved)
        if cuda:
            client.rng_states["cuda"] = torch.cuda.get_rng_state(client.device)
            torch.cuda.set_rng_state(saved_cuda, client.device)


def init_rng_states(client: Client, seed: int) -> None:
    stream = client_seed(seed + 1, client.cid)  # independent of the batch generator's
    client.rng_states["cpu"] = torch.Generator().manual_seed(stream).get_state()
    if client.device.type == "cuda":
        with torch.random.fork_rng(devices=[client.device]):
            torch.cuda.manual_seed(stream)
            client.rng_states["cuda"] = torch.cuda.get_rng_state(client.device)


def build_task(cfg: RunConfig) -> Task:
    """The task; LLM tasks read ``cfg.model`` to tokenize with the model's tokenizer."""
    return TASKS.entry(cfg.task.name).build(cfg.task, cfg.seed, cfg.model)


class ClientGroup:
    """The clients ``cids`` of a run, built in this process from the config and the plan
    the runner built."""

    def __init__(self, cfg: RunConfig, cids: list[int], device: torch.device,
                 plan: RunPlan,
                 frozen: dict[str, torch.Tensor] | None = None) -> None:
        torch.set_num_threads(cfg.torch_threads)
        import_plugins(cfg.imports)  # a Ray actor's registries get the config's components
        self.cfg = cfg
        self.cids = list(cids)
        self.device = device
        self.topology = plan.topology
        self.strategy = plan.strategy
        self.task = build_task(cfg)
        torch.manual_seed(cfg.seed)  # every replica starts from the same initial model
        self.base_model = MODELS.entry(cfg.model.name).build(cfg.model, self.task.model_spec())
        self.base_model.to(device)
        self.shared = self.strategy.init_process(self.base_model)
        if frozen:  # before the replicas and their states: the built copy is freed now
            self.adopt(frozen)
        self.fault_seed = fault_seed(cfg.faults, cfg.seed)
        self.attacks = {cid: Attack(cfg.faults.attack) for cid in plan.byzantine
                        if cid in self.cids}
        self.clock = ComputeClock(cfg.compute, cfg.seed, self.cids, self.base_model,
                                  self.task.model_spec(), cfg.strategy)
        holders = self.strategy.data_holders()
        shards = self.task.client_data(holders, device)
        self.clients: dict[int, Client] = {}
        for cid in self.cids:
            client = Client(
                cid=cid,
                model=replica(self.base_model),
                data=shards.get(cid),
                device=device,
                generator=torch.Generator().manual_seed(client_seed(cfg.seed, cid)),
                speed=self.clock.speed[cid],
                task=self.task,  # init_state may start the state from a gradient
            )
            init_rng_states(client, cfg.seed)
            with own_rng(client):
                client.state = self.strategy.init_state(client, self.shared)
            self.clients[cid] = client
        self.batcher = make_batcher(cfg, self.strategy, self.base_model, self.clients,
                                    self.task)
        # the global average model is evaluated in the initial model itself (made after
        # the replicas, which copy it), with what the strategy's state_vector needs
        self.probe = Client(cid=-1, model=self.base_model, data=None, device=device,
                            generator=torch.Generator())
        self.probe.state = self.strategy.init_eval_state(self.probe, self.shared)

    def shareable(self) -> dict[str, torch.Tensor]:
        """The frozen weights that every process of the run holds identically and never
        writes (a LoRA base, SubCGE's W without refreshes): what several processes on one
        machine can map from a single copy. Empty on a GPU and for a strategy that writes
        them (``SharedTensors.frozen`` other than ``read_only``: SeedFlood with refreshes,
        SPES)."""
        if (self.device.type != "cpu"
                or self.strategy.shared_tensors(self.shared).frozen != "read_only"):
            return {}
        return {name: p.data for name, p in self.base_model.named_parameters()
                if not p.requires_grad}

    def adopt(self, frozen: dict[str, torch.Tensor]) -> None:
        """Use ``frozen`` (read-only tensors over shared memory, equal to this process's
        own) as the frozen weights: every replica shares the parameter objects of the base
        model, so one swap of ``.data`` each moves them all and frees the private copy."""
        live = dict(self.base_model.named_parameters())
        for name, tensor in frozen.items():
            p = live[name]
            if p.requires_grad or p.shape != tensor.shape or p.dtype != tensor.dtype:
                raise StrategyError(f"shared frozen weight {name} does not match this "
                                    f"process's ({tuple(tensor.shape)} {tensor.dtype} vs "
                                    f"{tuple(p.shape)} {p.dtype})")
            p.data = tensor

    def run_phase(
        self, round_: int, step: int, phase: str, inboxes: dict[int, list[Message]],
        members: RoundMembers | None = None,
    ) -> tuple[list[Message], dict[int, float]]:
        """Run ``phase`` (position ``step`` in the round) for every hosted client present
        this round whose role the phase is declared for: their outgoing messages, sized,
        and each present client's compute time in simulated seconds."""
        ctx = PhaseContext(round_, phase, step, self.topology.round_graph(round_), self.task,
                           self.shared, None if members is None else members.known,
                           frozenset() if members is None else frozenset(members.joined),
                           runner=None if self.batcher is None else self.batcher.runner)
        running = self.present(members)
        self.strategy.begin_phase(ctx, [self.clients[c] for c in running])
        outgoing: list[Message] = []
        compute: dict[int, float] = {}
        for cid in running:
            self.clients[cid].steps = 0
        # a client for whom this is not a phase of its role computes nothing and sends
        # nothing (listed all the same, so the clock sees every present client as before)
        taking = [cid for cid in running if self.strategy.phase_method(phase, cid) is not None]

        def body(cid: int) -> list[Message]:
            client, attack = self.clients[cid], self.attacks.get(cid)
            client_ctx = ctx if attack is None else dataclasses.replace(
                ctx, tamper=self._tamper(attack, round_, step, cid))
            with blame(self.strategy.name, phase, cid, round_):
                check_state(self.strategy, client.state)
                with own_rng(client):
                    sent = self.strategy.run_phase(client, inboxes.get(cid, []), client_ctx)
                check_state(self.strategy, client.state)
                return sent

        ran = self.execute(taking, body)
        for cid in running:
            client = self.clients[cid]
            if cid not in ran:
                compute[cid] = self.clock.seconds(cid, 0, 0.0)
                continue
            sent, wall = ran[cid]
            attack = self.attacks.get(cid)
            compute[cid] = self.clock.seconds(cid, client.steps, wall)
            # what the phase returned is still its own: a wrong sender or a payload with
            # no wire size is its mistake, named like one it raised
            with blame(self.strategy.name, phase, cid, round_):
                for seq, msg in enumerate(sent):
                    if msg.src != cid:
                        raise StrategyError(f"a message claiming to come from client "
                                            f"{msg.src}")
                    msg.seq = seq
                    # a Byzantine payload (an omniscient attack's: once the phase has run)
                    if attack is not None and not msg.tampered and not attack.cfg.OMNISCIENT:
                        msg.payload = attack(msg.payload, msg.dst, step, seq, [
                            self.fault_seed, ATTACK_SALT, round_, step, cid, msg.dst, seq])
                    msg.nbytes = wire_size(msg.payload)
            outgoing.extend(sent)
        return outgoing, compute

    def execute(self, cids: list[int], body: Callable[[int], Any]) -> dict[int, tuple[Any, float]]:
        """``body(cid)`` for each client, one after another or batched: each result and
        the client's own wall-clock seconds."""
        if self.batcher is not None:
            return self.batcher.run(cids, body)
        out = {}
        for cid in cids:
            started = time.perf_counter()
            out[cid] = (body(cid), time.perf_counter() - started)
        return out

    def _tamper(self, attack: Attack, round_: int, step: int,
                cid: int) -> Callable[[Any, int], Any] | None:
        """What a Byzantine client does to a value it commits to (None for ``forge`` and
        the omniscient attacks: it commits honestly and its payload changes afterwards, so
        it no longer matches its commitment)."""
        if attack.cfg.name == "forge" or attack.cfg.OMNISCIENT:
            return None
        return lambda value, dst: attack(value, dst, step, TAMPER_SEQ, [
            self.fault_seed, ATTACK_SALT, round_, step, cid, dst, TAMPER_SEQ])

    def present(self, members: RoundMembers | None) -> list[int]:
        """The hosted clients that take part (all of them without churn), in id order."""
        return self.cids if members is None else [c for c in self.cids
                                                   if c in members.present]

    def vectors(self, cids: list[int]) -> dict[int, np.ndarray]:
        return {cid: self.strategy.state_vector(self.clients[cid]) for cid in cids}

    def bootstrap(self, cid: int, vector: np.ndarray | None) -> None:
        client = self.clients[cid]
        with own_rng(client):
            self.strategy.bootstrap(client, vector, self.shared)

    def pop_stats(self) -> dict[int, dict[str, Stat]]:
        """Per-client statistics the strategy recorded since the last call."""
        out = {}
        for cid, client in self.clients.items():
            if client.stats:
                out[cid], client.stats = client.stats, {}
        return out

    def param_sum(self, cids: list[int] | None = None) -> np.ndarray | None:
        """Σ θ_i over the hosted clients ``cids`` (default: all) in float64, summed in
        client order; None if there are none."""
        total = None
        for cid in self.cids if cids is None else cids:
            vec = self.strategy.state_vector(self.clients[cid])
            total = vec if total is None else total + vec
        return total

    def evaluate(self, mean: np.ndarray, gmp: bool, per_client: bool,
                 cids: list[int] | None = None) -> dict[str, Any]:
        """Squared distance of each client to the mean model, each client's test metrics
        (if ``per_client``) and the test metrics of the mean model itself (if ``gmp``)."""
        out: dict[str, Any] = {"sq_dist": {}, "client": {}}
        for cid in self.cids if cids is None else cids:
            client = self.clients[cid]
            out["sq_dist"][cid] = float(np.sum((self.strategy.state_vector(client) - mean) ** 2))
            if per_client:
                out["client"][cid] = self.task.evaluate(client.model, self.device)
        if gmp:
            self.strategy.load_state_vector(self.probe, mean)
            out["gmp"] = self.task.evaluate(self.base_model, self.device)
            if self.cfg.eval.select != "none":  # the split the run selects on
                out["gmp_val"] = self.task.validate(self.base_model, self.device)
        return out

    def client_vectors(self) -> dict[int, np.ndarray]:
        return {cid: self.strategy.state_vector(c) for cid, c in self.clients.items()}

    # ------------------------------------------------------------------ checkpoints
    def private_tensors(self, client: Client) -> dict[str, torch.Tensor]:
        """The client's own model tensors: everything not shared with the process's base
        model (frozen weights are stored once, by the process, when they can change)."""
        shared = {t.data_ptr() for t in self.base_model.state_dict().values()}
        shared.update(t.data_ptr() for t in self.strategy.shared_tensors(self.shared).tensors)
        return {name: t for name, t in client.model.state_dict().items()
                if t.data_ptr() not in shared}

    def save_clients(self) -> dict[int, dict[str, Any]]:
        """Everything each hosted client needs to continue bit-identically."""
        out = {}
        for cid, client in self.clients.items():
            out[cid] = {
                "model": capture(self.private_tensors(client)),
                "state": capture(client.state),
                "generator": client.generator.get_state(),
                "rng_states": capture(client.rng_states),
                "attack": capture(self.attacks[cid]) if cid in self.attacks else None,
                "private_steps": client.private_steps,
                "sampler": None if client.data is None or client.data.epoch is None else {
                    "order": client.data.epoch[0], "at": client.data.epoch[1]},
            }
        return out

    def save_process(self) -> dict[str, Any]:
        """What the hosted clients share: the strategy's per-process object and, when the
        strategy changes them during a run, the shared frozen weights."""
        saved: dict[str, Any] = {"shared": capture(self.shared)}
        if self.strategy.shared_tensors(self.shared).frozen == "written":
            frozen = {name: p for name, p in self.base_model.named_parameters()
                      if not p.requires_grad}
            saved["base"] = capture(frozen)
        return saved

    def load(self, clients: dict[int, dict[str, Any]], process: dict[str, Any]) -> None:
        if "base" in process:
            live = dict(self.base_model.named_parameters())
            for name, value in process["base"].items():
                restore(live[name], value, self.device)
        self.shared = restore(self.shared, process["shared"], self.device)
        for cid, saved in clients.items():  # a client lost for real has no saved state
            client = self.clients[cid]
            private = self.private_tensors(client)
            for name, value in saved["model"].items():
                restore(private[name], value, self.device)
            client.state = restore(client.state, saved["state"], self.device)
            client.generator.set_state(saved["generator"])
            client.rng_states = restore({}, saved["rng_states"])
            client.private_steps = int(saved.get("private_steps", 0))
            sampler = saved.get("sampler")
            if sampler is not None and client.data is not None:  # epoch sampling's place
                client.data.epoch = (sampler["order"].to("cpu"), int(sampler["at"]))
            if saved["attack"] is not None:
                restore(self.attacks[cid], saved["attack"], self.device)
        relink = self.strategy.shared_tensors(self.shared).relink
        if relink is not None:
            relink(list(self.clients.values()))
