"""Splitting a task's data: a labelled dataset across clients (IID, Dirichlet(α) by label,
and shards), and unlabelled rows (token sequences, preference pairs) into a held-out
validation set and equal shards."""

from __future__ import annotations

import numpy as np
import torch

from decent.core.errors import ConfigError
from decent.tasks.base import ClientData

PARTITIONS = ("iid", "dirichlet", "shards")


def partition(
    labels: np.ndarray, n_clients: int, scheme: str, alpha: float, seed: int,
    shards_per_client: int = 2,
) -> list[np.ndarray]:
    """Indices of each client's examples.

    ``shards`` is McMahan et al.'s (2017) pathological non-IID split: examples sorted by
    label are cut into ``n_clients · shards_per_client`` equal shards and every client
    gets ``shards_per_client`` of them at random (with 2, most clients see two classes).

    ``dirichlet`` follows Hsu et al. (2019): for every class, the class's examples are
    split among clients in proportions drawn from Dir(α·1); small α gives each client
    few classes. Draws are repeated (with the next seed) until every client holds at
    least one example, since an empty shard cannot train."""
    if scheme not in PARTITIONS:
        allowed = ", ".join(PARTITIONS)
        raise ConfigError("task.partition", f"unknown partition '{scheme}'; choose: {allowed}")
    if n_clients > len(labels):
        raise ConfigError(
            "topology.n", f"{n_clients} clients but the task has only {len(labels)} examples"
        )
    rng = np.random.default_rng(seed)
    if scheme == "iid":
        return [np.sort(part) for part in np.array_split(rng.permutation(len(labels)), n_clients)]
    if scheme == "shards":
        n_shards = n_clients * shards_per_client
        if shards_per_client < 1 or n_shards > len(labels):
            raise ConfigError("task.shards_per_client",
                              f"need 1 ≤ shards_per_client ≤ {len(labels) // n_clients}")
        shards = np.array_split(np.argsort(labels, kind="stable"), n_shards)
        owner = rng.permutation(n_shards).reshape(n_clients, shards_per_client)
        return [np.sort(np.concatenate([shards[s] for s in row])) for row in owner]
    if alpha <= 0:
        raise ConfigError("task.alpha", f"must be > 0 (got {alpha})")
    classes = np.unique(labels)
    for _ in range(100):
        shards: list[list[int]] = [[] for _ in range(n_clients)]
        for c in classes:
            idx = rng.permutation(np.flatnonzero(labels == c))
            cuts = (np.cumsum(rng.dirichlet(np.full(n_clients, alpha)))[:-1] * len(idx)).astype(int)
            for client, part in enumerate(np.split(idx, cuts)):
                shards[client].extend(part.tolist())
        if min(len(s) for s in shards) > 0:
            return [np.sort(np.asarray(s, dtype=np.int64)) for s in shards]
    raise ConfigError(
        "task.alpha", f"Dirichlet(α={alpha}) keeps leaving clients empty; use a larger α"
    )


def hold_out(n: int, fraction: float, seed: int, field: str,
             too_few: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Indices of the validation rows — ``fraction`` of ``n`` rows (at least one), drawn with
    ``seed`` — and of the training rows, the rest; both ascending, so each keeps the rows'
    own order (a corpus's 'contiguous' split relies on it). ``ConfigError(field, too_few)``
    when no row would be left to train on."""
    n_val = max(1, round(fraction * n))
    if n - n_val < 1:
        raise ConfigError(field, too_few)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(n))
    return order[:n_val].sort().values, order[n_val:].sort().values


def row_shards(rows: torch.Tensor, holders: list[int], device: torch.device, seed: int, *,
               shuffle: bool, what: str, fix: str,
               data: type[ClientData] = ClientData) -> dict[int, ClientData]:
    """Unlabelled training ``rows`` dealt to the clients ``holders`` in equal parts: drawn at
    random (``shuffle``, from ``seed`` + 1, a stream apart from :func:`hold_out`'s) or in
    contiguous blocks; each shard keeps the rows' order and has zeros for labels.
    ``what``/``fix``: the rows in words and what to change when there are too few."""
    n = len(rows)
    if len(holders) > n:
        raise ConfigError("topology.n", f"{len(holders)} clients but only {n} training "
                          f"{what}: {fix}")
    order = np.random.default_rng(seed + 1).permutation(n) if shuffle else np.arange(n)
    parts = np.array_split(order, len(holders))
    return {cid: data(rows[torch.from_numpy(np.sort(p))].to(device),
                      torch.zeros(len(p), dtype=torch.long, device=device))
            for cid, p in zip(holders, parts, strict=True)}
