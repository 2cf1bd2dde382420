"""A client's local steps under ``privacy: {mechanism: dp_sgd}`` (:mod:`decent.privacy.dp_sgd`):
each one DP-SGD's, and the ε the client has spent so far recorded with its stats. Part of
the toolkit: :func:`~decent.strategies.local_training.local_steps` runs these in place of
ordinary steps for every method whose config has a ``privacy`` section on."""

from __future__ import annotations

import torch

from decent.core.errors import ConfigError
from decent.core.stats import Max
from decent.models import params
from decent.privacy.gaussian import PrivacyLedger, add_noise_
from decent.strategies.per_example import vmap_problem
from decent.strategies.step_batching import StepRequest
from decent.strategies.toolkit import private_gradient


def privacy_problem(model: torch.nn.Module) -> str | None:
    """Why DP-SGD's bound cannot hold for ``model`` (None: it can): a layer that mixes
    the examples of a batch (batch norm's statistics) makes one example's gradient depend
    on the others, so clipping no longer bounds its influence."""
    problem = vmap_problem(model)
    if problem is not None and "running statistics" in problem:
        return problem
    return None


def private_client_steps(request: StepRequest) -> float:
    """``request.steps`` DP-SGD steps for one client; the mean loss of its (non-empty)
    samples. The noise comes from the client's own generator, on the CPU, so a run is the
    same on every backend."""
    client, optimizer, task, cfg = request.client, request.optimizer, request.task, request.cfg
    assert cfg is not None
    dp, batch = cfg.privacy, request.batch_size  # type: ignore[attr-defined]
    problem = privacy_problem(client.model)
    if problem is not None:
        raise ConfigError("strategy.privacy.mechanism", f"dp_sgd cannot bound this model: "
                          f"{problem} (one example's gradient depends on the others)")
    schedule = cfg.lr_schedule if cfg.lr_schedule.active else None
    live = params.trainable_params(client.model)
    total, counted = 0.0, 0
    for i in range(request.steps):
        if schedule is not None:
            for group in optimizer.param_groups:
                group["lr"] = cfg.lr * schedule.factor(request.round_ * request.steps + i)
        loss, update = private_gradient(client, task, batch, dp.clip, charge=False)
        add_noise_(update, dp.sigma * dp.clip / batch, client.generator)
        optimizer.zero_grad(set_to_none=True)
        for name, p in live.items():
            p.grad = update[name].to(p.dtype)
        optimizer.step()
        if loss is not None:  # None: an empty Poisson sample
            total, counted = total + loss, counted + 1
    client.private_steps += request.steps
    ledger = PrivacyLedger.dp_sgd(dp.sigma * dp.clip / batch, dp.clip, batch,
                                  len(client.data))  # type: ignore[arg-type]
    ledger.spend(client.private_steps)
    client.stats["dp_epsilon"] = Max(ledger.epsilon(dp.delta))
    return total / max(counted, 1)
