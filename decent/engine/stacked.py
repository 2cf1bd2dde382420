"""A chunk of clients whose trainable parameters and optimiser state live in stacked
tensors ``[width, …]`` and whose local steps run as one computation.

Each client's ``model`` parameters (and its optimiser's state tensors) are views into row
``r`` of the stacks, so a strategy reads and writes its own client exactly as in
sequential mode. A view a strategy replaced (``p.data = …``, an optimiser's
``load_state_dict`` on resume) is noticed before the next steps and copied back in.

The stacks are ``width`` rows wide whatever the number of clients in the chunk (free rows
are padding): a client's arithmetic then has the same shapes in any grouping of clients
into processes, which is what makes batched results independent of the grouping (batched
kernels may pick their blocking, and so their summation order, by shape).

Forward and backward are ``torch.func.vmap`` of ``grad_and_value`` over
``functional_call`` of one client's module (the architecture every client shares; frozen
tensors, e.g. a LoRA base, are read once for all rows). The optimiser step is torch's
SGD (momentum, weight decay) or AdamW, written over the stacks as the same element-wise
formulas as ``torch.optim``'s single-tensor path (:mod:`decent.engine.stacked_optim`), with
a learning rate per row.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch.func import grad_and_value, vmap

from decent.engine.capture import Captured, say_once
from decent.engine.stacked_lora import adapted_layers, lora_grads
from decent.engine.stacked_optim import OPTIMIZER_STEPS
from decent.models.functional import BoundModule, is_transformers
from decent.strategies.base import Client
from decent.strategies.step_batching import MixRequest, StepRequest
from decent.tasks.base import ClientData, Task

# The optimiser-state tensors of each optimiser (torch.optim's names)
STATE_KEYS = {torch.optim.SGD: ("momentum_buffer",),
              torch.optim.AdamW: ("step", "exp_avg", "exp_avg_sq")}


def unbatchable(request: StepRequest) -> str | None:
    """Why ``request``'s steps cannot run stacked (None: they can)."""
    opt, cfg = request.optimizer, request.cfg
    if type(opt) not in STATE_KEYS or len(opt.param_groups) != 1:
        return f"the optimiser {type(opt).__name__} (batched: SGD or AdamW, one group)"
    group = opt.param_groups[0]
    if group.get("nesterov") or group.get("dampening") or group.get("amsgrad") \
            or group.get("maximize"):
        return "a Nesterov, dampened, AMSGrad or maximising optimiser"
    if cfg is not None and (cfg.router_loss.active or cfg.logit_z_loss > 0):
        return "router or logit z-loss terms"
    return None


@dataclass(frozen=True)
class Signature:
    """What the requests of one stacked computation share."""

    optimizer: type
    batch_size: int
    hyper: tuple[float, ...]  # momentum, weight decay, betas, eps

    @staticmethod
    def of(request: StepRequest) -> Signature:
        group = request.optimizer.param_groups[0]
        hyper = (group.get("momentum", 0.0), group["weight_decay"],
                 *group.get("betas", ()), group.get("eps", 0.0))
        return Signature(type(request.optimizer), request.batch_size, tuple(hyper))


class ChunkStack:
    """The clients ``clients`` (at most ``width``) as rows of stacked tensors."""

    def __init__(self, clients: list[Client[Any]], width: int,
                 compiled: bool = False) -> None:
        self.clients = clients
        self.width = width
        self.compiled = compiled  # execution.compile (decent.engine.capture)
        self._captured: dict[int, Captured] = {}  # id(task) → its compiled step
        self.row = {c.cid: r for r, c in enumerate(clients)}
        template = self.template = clients[0].model
        # a transformers model with LoRA: one forward through the shared base, the
        # clients' adapters by bmm (stacked_lora); any other model: vmap over the stack
        self.lora = adapted_layers(template) if is_transformers(template) else None
        self.names = [n for n, p in template.named_parameters() if p.requires_grad]
        self.params = {n: torch.zeros((width, *p.shape), dtype=p.dtype, device=p.device)
                       for n, p in template.named_parameters() if p.requires_grad}
        self.state: dict[str, dict[str, torch.Tensor]] = {}  # key → name → stack
        self._store: dict[str, torch.Tensor] | bool | None = None  # the shards
        # each client's trainable parameters, found once (a model's modules are fixed)
        self.trainable = {c.cid: {n: p for n, p in c.model.named_parameters()
                                  if p.requires_grad} for c in clients}
        for client in clients:
            self._link_params(client)

    def accepts(self, request: StepRequest) -> bool:
        """Whether ``request``'s steps can run in this chunk's stacked computation."""
        if unbatchable(request) is not None:
            return False
        return self.lora is None or request.task.splits_losses

    # ------------------------------------------------------------------ views
    def _trainable(self, client: Client[Any]) -> dict[str, torch.nn.Parameter]:
        return self.trainable[client.cid]

    def _link_params(self, client: Client[Any]) -> None:
        """Make ``client``'s parameters views of its row (copying in what is not)."""
        r = self.row[client.cid]
        for name, p in self._trainable(client).items():
            view = self.params[name][r]
            if p.data_ptr() != view.data_ptr():
                view.copy_(p.data)
                p.data = view

    def _state_stacks(self, key: str) -> dict[str, torch.Tensor]:
        if key not in self.state:
            if key == "step":  # torch.optim keeps a float32 scalar per parameter
                self.state[key] = {n: torch.zeros(self.width) for n in self.names}
            else:
                self.state[key] = {n: torch.zeros_like(s) for n, s in self.params.items()}
        return self.state[key]

    def _link_state(self, request: StepRequest, keys: tuple[str, ...]) -> None:
        """Make the optimiser state of the request's client views of its row: copied in
        where it has state, zeros where it has none yet (torch's initial state: a zero
        momentum buffer gives the first step's ``buf = d_p`` exactly)."""
        r = self.row[request.client.cid]
        params = self._trainable(request.client)
        for key in keys:
            stacks = self._state_stacks(key)
            for name, p in params.items():
                view = stacks[name][r]
                held = request.optimizer.state[p].get(key)
                if held is None:
                    view.zero_()
                elif held.data_ptr() != view.data_ptr():
                    view.copy_(held)
                request.optimizer.state[p][key] = view

    # ------------------------------------------------------------------ steps
    def take_steps(self, requests: list[StepRequest]) -> dict[int, float]:
        """Every request's steps (all of this chunk's clients, one signature); each
        client's mean loss."""
        sig = Signature.of(requests[0])
        keys = STATE_KEYS[sig.optimizer]
        if sig.optimizer is torch.optim.SGD and sig.hyper[0] == 0:
            keys = ()  # plain SGD keeps no state
        for req in requests:
            self._link_params(req.client)
            self._link_state(req, keys)
            req.client.model.train()
        rows = [self.row[req.client.cid] for req in requests]
        longest = max(req.steps for req in requests)
        grad_fn = self._grad_fn(requests[0].task)
        losses: dict[int, list[float]] = {r: [] for r in rows}
        norms: dict[int, list[float]] = {r: [] for r in rows}
        # rows of this chunk's clients that must not move in a step: clients that asked
        # for fewer steps, or none (absent, or not in this call); free rows are padding
        asked = set(rows)
        held_rows = [r for r in range(len(self.clients)) if r not in asked]
        for i in range(longest):
            active = [(r, req) for r, req in zip(rows, requests, strict=True) if i < req.steps]
            batch = self._batch([(r, req.client) for r, req in active], sig.batch_size)
            grads, loss = grad_fn(self.params, batch)
            still = held_rows + [r for r, req in zip(rows, requests, strict=True)
                                 if i >= req.steps]
            clip = requests[0].cfg.grad_clip if requests[0].cfg is not None else 0.0
            if clip > 0:
                norm = self._clip(grads, clip).tolist()
                for r, _ in active:
                    norms[r].append(norm[r])
            lr = self._learning_rates(active, i)
            self._update(sig, keys, grads, lr, still)
            values = loss.tolist()
            for r, _ in active:
                losses[r].append(values[r])
        out = {}
        for r, req in zip(rows, requests, strict=True):
            out[req.client.cid] = sum(losses[r]) / req.steps
            if norms[r]:
                req.client.stats["grad_norm"] = sum(norms[r]) / req.steps
        return out

    def _grad_fn(self, task: Task) -> Callable[..., tuple[dict[str, torch.Tensor],
                                                         torch.Tensor]]:
        """(stacked parameters, stacked batch) → (each row's gradients, each row's loss)."""
        template = self.template
        if self.lora is not None:
            if self.compiled:
                say_once("a LoRA chunk cuts its sequences to each batch's longest, so its "
                         "shapes change from step to step")
            layers = self.lora
            return lambda p, batch: lora_grads(template, layers, task, p, batch)

        def loss_of(p: dict[str, torch.Tensor], batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
            return task.loss(BoundModule(template, p), batch)  # type: ignore[arg-type]

        step = vmap(grad_and_value(loss_of))
        if not self.compiled:
            return step
        if id(task) not in self._captured:
            device = next(iter(self.params.values())).device
            self._captured[id(task)] = Captured(step, device.type == "cuda")
        return self._captured[id(task)]

    def _batch(self, active: list[tuple[int, Client[Any]]],
               batch_size: int) -> tuple[torch.Tensor, ...]:
        """Each active client's batch, drawn with its own generator (the draws sequential
        mode makes), at its row; the other rows take their shard's first examples (their
        results are discarded; a real batch keeps them finite)."""
        store = self._data_store(active)
        if store is not None:  # the examples of every row stacked: one gather per tensor
            drawn = [client.data.draw(batch_size, client.generator)  # type: ignore[union-attr]
                     for _, client in active]
            idx = torch.zeros((self.width, batch_size), dtype=torch.long)
            idx[torch.tensor([r for r, _ in active])] = torch.stack(drawn)
            device = next(iter(store.values())).device
            return type(active[0][1].data).gather(store, idx.to(device))
        drawn_batches = {r: client.data.sample(batch_size, client.generator)  # type: ignore[union-attr]
                         for r, client in active}
        first = next(iter(drawn_batches.values()))
        data = active[0][1].data
        return data.stack([drawn_batches.get(r, first)  # type: ignore[union-attr]
                           for r in range(self.width)])

    def _data_store(self, active: list[tuple[int, Client[Any]]]
                    ) -> dict[str, torch.Tensor] | None:
        """The chunk's shards (one kind of ``ClientData``, one per client) stacked: each
        of their per-example tensors (``PER_EXAMPLE``) as ``[width, largest shard, …]``,
        each client's shard a view of its row, the padding rows a copy of the first
        shard's (built once; None where the clients' data are not such shards)."""
        if self._store is False:
            return None
        if self._store is None:
            shards = [c.data for c in self.clients]
            kind = type(shards[0])
            if any(d is None or type(d) is not kind or not isinstance(d, ClientData)
                   for d in shards) or len({id(d) for d in shards}) != len(shards) \
                    or any(getattr(d, f) is None for d in shards for f in kind.PER_EXAMPLE):
                self._store = False
                return None
            longest = max(len(d) for d in shards)  # type: ignore[arg-type]
            store: dict[str, torch.Tensor] = {}
            for f in kind.PER_EXAMPLE:
                t0 = getattr(shards[0], f)
                # shards padded to the widest (prompts: zeros past the longest, masked)
                inner = [max(getattr(d, f).shape[k] for d in shards)
                         for k in range(1, t0.dim())]
                stack = torch.zeros((self.width, longest, *inner), dtype=t0.dtype,
                                    device=t0.device)
                for r, d in enumerate(shards):
                    t = getattr(d, f)
                    stack[(r, slice(len(t)), *(slice(k) for k in t.shape[1:]))] = t
                    setattr(d, f, stack[r, :len(t)])
                stack[len(shards):] = stack[0]
                store[f] = stack
            self._store = store
        assert isinstance(self._store, dict)
        x = self._store["x"]
        if any(c.data.x.data_ptr() != x[self.row[c.cid]].data_ptr()  # type: ignore[union-attr]
               for _, c in active):
            self._store = None  # a shard was replaced: stack them again
            return self._data_store(active)
        return self._store

    def _clip(self, grads: dict[str, torch.Tensor], clip: float) -> torch.Tensor:
        """torch.nn.utils.clip_grad_norm_ per row: the global norm over a row's tensors,
        scaled down to ``clip`` (with torch's 1e-6); the norms before clipping."""
        per = torch.stack([g.flatten(1).norm(dim=1) for g in grads.values()])
        total = per.norm(dim=0)
        coef = (clip / (total + 1e-6)).clamp(max=1.0)
        for g in grads.values():
            g.mul_(coef.view(-1, *[1] * (g.dim() - 1)))
        return total

    def _learning_rates(self, active: list[tuple[int, StepRequest]], i: int) -> list[float]:
        """Each row's learning rate at its step ``i`` (the schedule's factor at
        round · steps + i, as sequential mode sets it), also left in the client's
        optimiser as sequential mode leaves it; 0 where a row takes no step."""
        lr = [0.0] * self.width
        for r, req in active:
            group = req.optimizer.param_groups[0]
            cfg = req.cfg
            if cfg is not None and cfg.lr_schedule.active:
                group["lr"] = cfg.lr * cfg.lr_schedule.factor(req.round_ * req.steps + i)
            lr[r] = float(group["lr"])
        return lr

    @torch.no_grad()
    def _update(self, sig: Signature, keys: tuple[str, ...], grads: dict[str, torch.Tensor],
                lr: list[float], still: list[int]) -> None:
        """One optimiser step of every moving row, by torch's own implementation (the one
        ``optimizer.step()`` runs for a client alone): rows that share a learning rate
        and a step count go through it as one tensor, whose entries it updates
        elementwise exactly as each row's own; held rows are left as they were."""
        held = set(still)  # padding rows (past the chunk's clients) never move either
        moving = [r for r in range(len(self.clients)) if r not in held]
        # the rows' step counts read once (one transfer, not one per row)
        steps = self.state["step"][self.names[0]].tolist() if "step" in keys \
            else [0.0] * self.width
        groups: dict[tuple[float, float], list[int]] = {}
        for r in moving:
            groups.setdefault((lr[r], steps[r]), []).append(r)
        step = OPTIMIZER_STEPS[sig.optimizer]
        for (rate, _), rows in groups.items():
            whole = len(rows) == self.width  # every row: stepped in place, no gather
            idx = torch.tensor(rows)
            for name in self.names:
                p = self.params[name]
                state = {key: self.state[key][name] for key in keys}
                if whole:
                    step(p, grads[name], state, rate, sig.hyper)
                    continue
                at = idx.to(p.device)
                sub = {key: (t[idx] if key == "step" else t[at]) for key, t in state.items()}
                new_p = p[at]
                step(new_p, grads[name][at], sub, rate, sig.hyper)
                p[at] = new_p
                for key, t in state.items():
                    t[idx if key == "step" else at] = sub[key]


    # ------------------------------------------------------------------ gossip
    def can_mix(self, request: MixRequest) -> bool:
        names = set(self.names)
        return all(set(p) == names for p in request.payloads.values())

    @torch.no_grad()
    def mix(self, requests: list[MixRequest]) -> None:
        """Every request's θ_i ← keep_i θ_i + Σ_j w_ij θ_j at once: per tensor, one sparse
        (receivers × distinct payloads) by dense (payloads × size) product over the stack,
        written into the clients' rows (their parameters are views of them)."""
        columns: dict[int, int] = {}  # id(payload) → column: a payload sent to several
        payloads: list[dict[str, torch.Tensor]] = []  # receivers is read once
        at: list[list[int]] = [[], []]
        weights: list[float] = []
        keeps = [0.0] * self.width
        for req in requests:
            self._link_params(req.client)
            r = self.row[req.client.cid]
            keeps[r] = req.keep
            for src, payload in req.payloads.items():
                if id(payload) not in columns:
                    columns[id(payload)] = len(payloads)
                    payloads.append(payload)
                at[0].append(r)
                at[1].append(columns[id(payload)])
                weights.append(req.weights[src])
        keep = torch.tensor(keeps, dtype=torch.float64)
        asked = {self.row[req.client.cid] for req in requests}
        held = torch.tensor([r < len(self.clients) and r not in asked for r in range(self.width)])
        sparse = torch.sparse_coo_tensor(at, weights, (self.width, len(payloads)),
                                         dtype=torch.float64, check_invariants=False)
        for name in self.names:
            stack = self.params[name]
            mixed = rows_like(keep.to(stack.device, stack.dtype), stack) * stack
            if payloads:
                dense = torch.stack([p[name].to(stack.device) for p in payloads]
                                    ).to(stack.dtype).flatten(1)
                mixed += torch.sparse.mm(sparse.to(stack.device, stack.dtype),
                                         dense).view_as(stack)
            commit(stack, mixed, held)


def rows_like(v: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Per-row values ``v`` shaped to broadcast over ``like``'s rows."""
    return v.view(-1, *[1] * (like.dim() - 1))


def commit(dst: torch.Tensor, new: torch.Tensor, keep: torch.Tensor) -> None:
    """``dst ← new`` except in the rows ``keep``."""
    if bool(keep.any()):
        new = torch.where(rows_like(keep.to(dst.device), dst), dst, new)
    dst.copy_(new)
