"""Small configs shared by the tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# The shared benchmark data folder sits beside the checkout: <parent of repo>/shared/data.
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

def tiny(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A small digits config as a dict; keyword arguments replace whole top-level keys."""
    cfg: dict[str, Any] = {
        "name": "t",
        "seed": 0,
        "rounds": 3,
        "topology": {"name": "ring", "n": 6},
        "strategy": {"name": "dsgd", "local_steps": 2, "batch_size": 8, "lr": 0.1},
        "task": {"name": "digits"},
        "model": {"name": "mlp", "hidden": [16]},
        "eval": {"every": 1, "per_client": True},
        "tracking": {"out_dir": str(tmp_path / "runs"), "progress": False,
                     "wandb": {"mode": "disabled"}},
    }
    cfg.update(sections)
    return cfg


def save_fake_cifar(path: Path, train: int, test: int) -> Path:
    """``train`` / ``test`` random 32×32 RGB images in CIFAR-10's hub format, saved with
    ``datasets`` at ``path`` (what ``task.data_dir`` reads)."""
    from decent.tasks.cifar10 import write_random_cifar10

    return write_random_cifar10(path, train, test)


def engine_for(cfg: Any) -> Any:
    """The engine the runner would build for ``cfg`` (its backend's executor), with the
    plan built here as the runner builds it."""
    from decent.engine.plan import build_plan
    from decent.run.runner import make_engine

    return make_engine(cfg, build_plan(cfg))


def run_capturing(fn: Any, cfg: Any, *args: Any, engine: Any = None
                  ) -> tuple[Any, dict[int, Any]]:
    """``fn(*args, engine=...)`` (the runner's ``run`` or ``resume``) on ``engine`` (default:
    a fresh one for ``cfg``), and every client's state vector as the run left it."""
    backend = engine if engine is not None else engine_for(cfg)
    vectors: dict[int, Any] = {}
    close = backend.close

    def capture_then_close() -> None:
        vectors.update(backend.client_vectors())
        close()

    backend.close = capture_then_close
    return fn(*args, engine=backend), vectors


def rows_and_vectors(cfg: Any) -> tuple[list[dict[str, Any]], dict[int, Any]]:
    """A run's metric rows without wall time (what must match across backends) and every
    client's final state vector."""
    from decent.run.runner import run

    result, vectors = run_capturing(run, cfg, cfg)
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows], vectors


class WrapsBackend:
    """Stands in for an engine (every attribute read goes to it); subclasses change what
    ``run_round`` does at round ``round_`` (e.g. kill an actor there)."""

    def __init__(self, backend: Any, round_: int) -> None:
        self.backend, self.round = backend, round_

    def __getattr__(self, name: str) -> Any:
        return getattr(self.backend, name)


class KillsAnActor(WrapsBackend):
    """Wraps an engine on Ray: ray.kill()s its second actor (with 4 clients per actor, the one
    hosting clients 4..7) before ``round_``."""

    def run_round(self, r: int) -> Any:
        import ray

        if r == self.round:
            ray.kill(self.backend.executor.actors[1])
        return self.backend.run_round(r)


# Methods that run on a star around a server at vertex 0.
STAR_METHODS = ("fedavg", "diloco", "spes")
PUSH_METHODS = ("sgp", "osgp")  # push-sum: on a directed graph


def moe_lm(tmp_path: Path, **sections: Any) -> dict[str, Any]:
    """A tiny-moe language-model config (what SPES needs) on a short Shakespeare slice."""
    return tiny(tmp_path, **{
        "task": {"name": "lm", "corpus": "shakespeare", "seq_len": 32, "max_tokens": 20_000,
                 "partition": "contiguous", "max_eval_sequences": 8},
        "model": {"name": "causal_lm", "path": "tiny-moe"},
        **sections})


def method_config(tmp_path: Path, name: str, n: int, **sections: Any) -> dict[str, Any]:
    """A small config any strategy ``name`` runs: a star for the server methods, a ring
    otherwise, and the tiny MoE language model for SPES."""
    topology = {"name": "star" if name in STAR_METHODS else "ring", "n": n}
    if name == "dso":  # one aggregator (vertex 0), the rest workers: as a star's server
        topology = {"name": "two_tier", "n": n, "aggregators": 1}
    if name in PUSH_METHODS:
        topology = {"name": "directed_exponential", "n": n}
    strategy = {"name": name}
    if name == "spes":  # the paper's schedule shape, its 2 000-step warm-up cut to one step
        strategy.update(local_steps=2, batch_size=4, merge_warmup_steps=0,
                        lr_schedule={"name": "cosine", "warmup_steps": 1, "min_lr_ratio": 0.1})
    strategy.update(sections.pop("strategy", {}))
    if name == "spes":
        return moe_lm(tmp_path, topology=topology, strategy=strategy, **sections)
    return tiny(tmp_path, topology=topology, strategy=strategy, **sections)


def assert_ray_equals_local(base: dict[str, Any], clients_per_actor: int) -> None:
    """The run ``base`` on Ray (``clients_per_actor`` clients per actor) gives the local
    run's metric rows and every client's final state, bit for bit."""
    import numpy as np

    from decent.engine.config import from_dict

    local_rows, local_vectors = rows_and_vectors(from_dict(base))
    ray_rows, ray_vectors = rows_and_vectors(from_dict(
        {**base, "backend": "ray", "ray": {"clients_per_actor": clients_per_actor}}))
    assert ray_rows == local_rows
    for cid, vec in local_vectors.items():
        np.testing.assert_array_equal(ray_vectors[cid], vec)


def rows_and_vectors_on(engine: Any, cfg: Any) -> tuple[list[dict[str, Any]], dict[int, Any]]:
    """What ``rows_and_vectors(cfg)`` returns, from a run on ``engine``, an engine for ``cfg``
    a test has already built (and looked at): Ray's actors start once, not twice."""
    from decent.run.runner import run

    result, vectors = run_capturing(run, cfg, cfg, engine=engine)
    return [{k: v for k, v in r.items() if k != "round_wall_s"} for r in result.rows], vectors


def in_session(session: int) -> list[int]:
    """Live processes of session ``session``, zombies aside."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[3]) == session:
            pids.append(int(entry.name))
    return pids


def assert_resumed_equals_full(cfg: Any) -> None:
    """``cfg`` run whole, then resumed from a copy of its run directory without the
    summary (its newest checkpoint): the same rows and final states, bit for bit."""
    import shutil

    import numpy as np

    from decent.run.runner import resume, run

    full, full_vectors = run_capturing(run, cfg, cfg)
    partial = full.run_dir.parent / f".{full.run_dir.name}-killed.partial"
    shutil.copytree(full.run_dir, partial)
    (partial / "summary.json").unlink()
    resumed, vectors = run_capturing(resume, cfg, partial)
    assert [{k: v for k, v in r.items() if k != "round_wall_s"} for r in resumed.rows] == \
        [{k: v for k, v in r.items() if k != "round_wall_s"} for r in full.rows]
    for cid, vec in full_vectors.items():
        np.testing.assert_array_equal(vectors[cid], vec)


def first_round_messages(cfg: Any) -> list[Any]:
    """Every message the router accepted in round 0 of ``cfg``'s run (sized, attacked)."""
    from decent.run.runner import check, make_engine

    engine = make_engine(cfg, check(cfg))
    posted = engine.record_messages()
    try:
        engine.run_round(0)
    finally:
        engine.close()
    return posted
