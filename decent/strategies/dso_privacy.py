"""DSO's differential privacy (``strategy.dp``): what an honest worker computes and sends,
what its ``dp_epsilon`` bounds, and what that figure leaves out.

An honest worker's release is DP-SGD's (:mod:`decent.privacy.gaussian`: the mechanism,
why Poisson sampling, and the accountant's event). Everything else it sends is computed
from its noised gradients and public data only — the public probe's kept indices, error
feedback's residual of past noised gradients — so the ε its
:class:`~decent.privacy.gaussian.PrivacyLedger` composes bounds all it sends;
``dp_epsilon`` is the largest over the honest workers.

* **Asynchronous mode is covered.** A worker's release is still one subsampled Gaussian
  on its shard, taken at an older model; a model chosen from earlier releases is what the
  accountant's adaptive composition allows. The ledger counts the releases a worker
  makes, one per gradient.
* **Churn and resume are covered.** A worker that leaves and rejoins keeps its ledger
  (its earlier releases were of the same shard); a checkpoint stores the ledgers.
* **Not covered, and the run's summary says so** (:func:`privacy_note`): a Byzantine
  worker's own data — it sends its attack, un-noised, and no ε is reported for it. A
  private probe with semantic Top-k decides the kept indices, which travel un-noised:
  that configuration is refused before the run starts.
"""

from __future__ import annotations

from typing import Any

import torch

from decent.core.stats import Max
from decent.privacy.gaussian import DPConfig, PrivacyLedger, add_noise_, noise_std
from decent.strategies.base import Client, PhaseContext
from decent.strategies.toolkit import private_gradient, stochastic_gradient


def dp_noise_std(dp: DPConfig, workers: int) -> float:
    """σ with N = ``dp.population``, by default the number of workers."""
    return noise_std(dp.clip, dp.epsilon, dp.delta, dp.population or workers)


def worker_ledger(cfg: Any, client: Client[Any], workers: int) -> PrivacyLedger:
    """A worker's ledger (``cfg``: DSO's): the one it holds already, else a fresh one for
    its shard. A worker that leaves and rejoins starts afresh (``Strategy.bootstrap``)
    but for its ledger: its earlier releases were of the same shard, and still count."""
    held = client.state.ledger if client.state is not None else None
    if held is not None:
        return held
    return PrivacyLedger.dp_sgd(dp_noise_std(cfg.dp, workers), cfg.dp.clip,
                                cfg.batch_size, len(client.data))


def worker_gradient(client: Client[Any], ctx: PhaseContext,
                    cfg: Any) -> dict[str, torch.Tensor]:
    """The gradient a worker starts (not charged: DSO charges it over its ticks), its loss
    recorded: with DP, an honest worker's is DP-SGD's before the noise; a Byzantine
    worker runs its own code and draws an ordinary batch."""
    if cfg.dp.enabled and ctx.tamper is None:
        loss, g = private_gradient(client, ctx.task, cfg.batch_size, cfg.dp.clip,
                                   charge=False)
    else:
        loss, g = stochastic_gradient(client, ctx.task, cfg.batch_size, charge=False)
    if loss is not None:  # None: an empty Poisson sample, no loss to report
        client.stats["loss"] = loss
    return g


def release(client: Client[Any], g: dict[str, torch.Tensor], cfg: Any,
            workers: int) -> None:
    """An honest worker's clipped ``g`` made its release: the noise (from its own
    generator), and the spending recorded."""
    add_noise_(g, dp_noise_std(cfg.dp, workers), client.generator)
    ledger = client.state.ledger
    ledger.spend()
    client.stats["dp_epsilon"] = Max(ledger.epsilon(cfg.dp.delta))


def privacy_note(dp: DPConfig, workers: list[int], byzantine: list[int],
                 attack: str) -> str | None:
    """What the run's ``dp_epsilon`` leaves out, or why there is none (None with DP off,
    or when it covers every worker)."""
    attackers = [c for c in byzantine if c in workers]
    # `forge` commits to its honest, noised release and negates it on the way out:
    # post-processing, so its data stays covered; any other attack sends its own
    if not dp.enabled or not attackers or attack == "forge":
        return None
    if len(attackers) == len(workers):
        return ("no dp_epsilon: every worker is Byzantine and sends its attack un-noised, "
                "so no worker's data has a privacy bound")
    return (f"dp_epsilon covers the honest workers only: the Byzantine workers {attackers} "
            "send their attack un-noised, so their own data has no bound")
