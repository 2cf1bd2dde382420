"""Batched execution of a process's clients (``execution.mode``): each client's phase runs
as in sequential mode, in a greenlet of its own, up to its ``local_steps`` call; when every
client of a chunk has reached that call (or finished), their steps run as one stacked
computation (:class:`~decent.engine.stacked.ChunkStack`) and each client resumes with its
own loss.

Switching between greenlets keeps what sequential mode keeps per client: torch's global
RNG state (each client's own stream, swapped in by ``own_rng``) and the grad mode are
saved where a client pauses and restored where it resumes, and every client starts from
the global state the process had, as it does when clients run one after another.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from greenlet import getcurrent, greenlet

from decent.engine import op_count
from decent.engine.capture import say_once
from decent.engine.stacked import ChunkStack, Signature, is_transformers
from decent.engine.stacked_lora import adapted_layers
from decent.engine.stacked_zo import estimates, unstackable
from decent.engine.stacked_zo import model_problem as zo_model_problem
from decent.models import params
from decent.strategies.base import Client, Strategy
from decent.strategies.gossip import weighted_sum
from decent.strategies.local_training import one_client_steps
from decent.strategies.step_batching import MixRequest, StepRequest
from decent.strategies.zo_estimate import EstimateRequest, estimate_alone

Body = Callable[[int], Any]
Request = StepRequest | MixRequest | EstimateRequest


def model_problem(model: torch.nn.Module) -> str | None:
    """Why ``model`` cannot be stacked over clients (None: it can): batched forward passes
    need a module without mutable buffers (batch norm's running statistics) and without
    random layers in training (dropout would draw differently from sequential mode), and
    one ``torch.func.vmap`` can trace."""
    if is_transformers(model) and adapted_layers(model) is None:
        # its attention-mask code branches on the data (is any position padded?), which
        # a vmap over clients cannot trace; with LoRA alone trainable, the clients share
        # one forward through the base instead (stacked_lora)
        return "a transformers model is stacked through its LoRA adapters: enable model.lora"
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._NormBase):
            return f"its layer {name or 'model'} keeps running statistics"
        if isinstance(module, torch.nn.modules.dropout._DropoutNd) and module.p > 0:
            return f"its layer {name or 'model'} is a dropout (p={module.p})"
    return None


def batching_problem(strategy: Strategy[Any], model: torch.nn.Module) -> str | None:
    """Why this run's clients cannot be batched (None: they can)."""
    if not strategy.batchable:
        return (f"strategy '{strategy.name}' has no stacked local steps "
                f"({strategy.batch_note or 'its clients do not share one training step'})")
    zo = getattr(strategy, "zo_estimator", None)  # zeroth-order: estimates, not steps
    problem = zo_model_problem(model, zo) if zo is not None and is_transformers(model) \
        else model_problem(model)
    return None if problem is None else f"the model cannot be stacked: {problem}"


def slower_batched(model: torch.nn.Module) -> bool:
    """Whether ``auto`` keeps this model sequential because stacking it is slower or much
    larger, as measured on a CPU (``benchmarks/batched_clients.py``):

    - a convolution: stacked, it is a grouped one, whose backward took 2× the clients'
      own convolutions one by one (the CIFAR-10 CNN: 1.9–2.6× the sequential round);
    - a transformers model: one forward over every client's batch holds every client's
      activations at once (SmolLM2 LoRA, 16 clients: 3.6–4.2× the memory) and ran at
      0.66–0.91× the sequential speed at 16 clients (0.94–1.29× at 4).

    Both are arithmetic-bound steps, which stacking does not reduce on a CPU."""
    on_cpu = all(p.device.type == "cpu" for p in model.parameters())
    return on_cpu and (is_transformers(model) or any(
        isinstance(m, torch.nn.modules.conv._ConvNd) for m in model.modules()))


class Batcher:
    """The chunks of a process's training clients: consecutive ``width`` of them in id
    order, each a :class:`ChunkStack` of ``width`` rows."""

    def __init__(self, clients: list[Client[Any]], width: int,
                 compiled: bool = False) -> None:
        self.width = width
        self.chunks = [ChunkStack(clients[k: k + width], width, compiled)
                       for k in range(0, len(clients), width)]
        self.chunk_of = {c.cid: chunk for chunk in self.chunks for c in chunk.clients}

    def run(self, cids: list[int], body: Body) -> dict[int, tuple[Any, float]]:
        """``body(cid)`` for each of ``cids`` (in that order, chunk by chunk; clients
        outside every chunk run alone): its result and the wall-clock seconds that were
        its own (its share of a stacked computation: in proportion to its steps)."""
        out: dict[int, tuple[Any, float]] = {}
        groups: dict[int, list[int]] = {}
        for cid in cids:
            chunk = self.chunk_of.get(cid)
            groups.setdefault(-1 if chunk is None else id(chunk), []).append(cid)
        for cid in groups.pop(-1, []):
            started = time.perf_counter()
            out[cid] = (body(cid), time.perf_counter() - started)
        for members in groups.values():
            out.update(self._run_chunk(self.chunk_of[members[0]], members, body))
        return {cid: out[cid] for cid in cids}

    @property
    def runner(self) -> Callable[[Any], Any]:
        """What a phase's context hands the toolkit (``PhaseContext.runner``): a client's
        request, served with its chunk's."""
        return self._pause

    def _run_chunk(self, chunk: ChunkStack, cids: list[int],
                   body: Body) -> dict[int, tuple[Any, float]]:
        threads = {cid: greenlet(lambda c=cid: body(c)) for cid in cids}
        spent = dict.fromkeys(cids, 0.0)
        done: dict[int, Any] = {}
        waiting: dict[int, Request] = {}
        base, grad = torch.random.get_rng_state(), torch.is_grad_enabled()

        def enter(cid: int, value: Any = None) -> None:
            # a client starts from the process's state (a paused one restores its own)
            torch.random.set_rng_state(base)
            torch.set_grad_enabled(grad)
            started = time.perf_counter()
            thread = threads[cid]
            result = thread.switch(value) if thread else thread.switch()  # started: resume
            spent[cid] += time.perf_counter() - started
            if threads[cid].dead:
                done[cid] = result
            else:
                waiting[cid] = result

        for cid in cids:
            enter(cid)
        while waiting:
            asked, waiting = waiting, {}
            started = time.perf_counter()
            with op_count.region(op_count.CHUNK):
                answers = self._serve(chunk, list(asked.values()))
            elapsed = time.perf_counter() - started
            weight = {cid: getattr(req, "steps", 1) for cid, req in asked.items()}
            total = sum(weight.values()) or 1
            for cid in asked:
                spent[cid] += elapsed * weight[cid] / total
            for cid in cids:
                if cid in asked:
                    enter(cid, answers[cid])
        torch.random.set_rng_state(base)
        torch.set_grad_enabled(grad)
        return {cid: (done[cid], spent[cid]) for cid in cids}

    @staticmethod
    def _serve(chunk: ChunkStack, requests: list[Request]) -> dict[int, Any]:
        """The requests' answers: the mixes at once, the steps in one stacked computation
        per signature, the ZO estimates in one per estimator (stacked_zo)."""
        out: dict[int, Any] = {}
        mixes = [req for req in requests if isinstance(req, MixRequest)]
        if mixes:
            chunk.mix(mixes)
            out.update(dict.fromkeys((req.client.cid for req in mixes), None))
        by_sig: dict[Signature, list[StepRequest]] = {}
        for req in requests:
            if isinstance(req, StepRequest):
                by_sig.setdefault(Signature.of(req), []).append(req)
        for group in by_sig.values():
            out.update(chunk.take_steps(group))
        by_estimator: dict[tuple[int, int], list[EstimateRequest]] = {}
        for req in requests:
            if isinstance(req, EstimateRequest):
                by_estimator.setdefault((id(req.estimator), id(req.task)), []).append(req)
        if by_estimator and chunk.compiled:
            say_once("a zeroth-order chunk's forwards are hooked layer by layer, not one "
                     "traced step")
        for estimates_of in by_estimator.values():
            out.update(estimates(estimates_of))
        return out

    def _pause(self, request: Request) -> Any:
        """``local_steps`` or a gossip average inside a batched phase: hand the request to
        the chunk's coordinator and wait for the answer (or serve it here, alone, where
        it cannot be stacked or the client has no chunk)."""
        me = getcurrent()
        chunk = self.chunk_of.get(request.client.cid)
        if isinstance(request, MixRequest):
            if me.parent is None or chunk is None or not chunk.can_mix(request):
                mix_alone(request)
                return None
        elif isinstance(request, EstimateRequest):
            if me.parent is None or chunk is None or unstackable(request) is not None:
                return estimate_alone(request)
        elif me.parent is None or chunk is None or not chunk.accepts(request):
            return one_client_steps(request)
        rng, grad = torch.random.get_rng_state(), torch.is_grad_enabled()
        answer = me.parent.switch(request)
        torch.random.set_rng_state(rng)
        torch.set_grad_enabled(grad)
        return answer


def mix_alone(request: MixRequest) -> None:
    """One client's mix as sequential mode computes it."""
    live = params.trainable_params(request.client.model)
    params.load(request.client.model, weighted_sum(live, request.keep, request.weights,
                                                   request.payloads))
