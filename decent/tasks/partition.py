"""Splitting a labelled dataset across clients: IID and Dirichlet(α) by label."""

from __future__ import annotations

import numpy as np

from decent.platform.errors import ConfigError

PARTITIONS = ("iid", "dirichlet")


def partition(
    labels: np.ndarray, n_clients: int, scheme: str, alpha: float, seed: int
) -> list[np.ndarray]:
    """Indices of each client's examples.

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
