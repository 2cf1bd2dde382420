"""What every task provides to strategies and to evaluation."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from decent.core.errors import ConfigError


@dataclass
class ClientData:
    """A client's local training shard, kept as tensors on the client's device."""

    x: torch.Tensor
    y: torch.Tensor

    # the attributes holding one entry per example: what a chunk of clients stacks once
    # (``[rows, largest shard, …]``) to draw every row's batch in one gather
    PER_EXAMPLE: ClassVar[tuple[str, ...]] = ("x", "y")

    def __len__(self) -> int:
        return int(self.y.shape[0])

    # how batches are drawn (``task.sampling``, set by the task): replacement, or epoch —
    # the shard in a random order drawn from the client's RNG each epoch, each example
    # once an epoch (MeZO's, a shuffled data loader's); a batch that reaches the end of
    # an epoch takes the rest from the next one's order, so every batch has batch_size
    sampling: ClassVar[str] = "replacement"

    def sample(self, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """A batch of the shard (:meth:`draw`), using the client's own RNG."""
        return self.rows(self.draw(batch_size, generator).to(self.x.device))

    def draw(self, batch_size: int, generator: torch.Generator) -> torch.Tensor:
        """The indices :meth:`sample` takes, on the CPU: uniform with replacement, or the
        next ``batch_size`` of the epoch's order (``sampling``)."""
        if self.sampling != "epoch":
            return torch.randint(len(self), (batch_size,), generator=generator)
        taken = []
        while batch_size > 0:
            if self.epoch is None or self.epoch[1] >= len(self):
                self.epoch = (torch.randperm(len(self), generator=generator), 0)
            order, at = self.epoch
            part = order[at: at + batch_size]
            taken.append(part)
            self.epoch = (order, at + len(part))
            batch_size -= len(part)
        return torch.cat(taken)

    @property
    def epoch(self) -> tuple[torch.Tensor, int] | None:
        """The current epoch's order and how far into it the draws are (None: before the
        first draw); what a checkpoint keeps of the sampler."""
        return self.__dict__.get("_epoch")

    @epoch.setter
    def epoch(self, value: tuple[torch.Tensor, int] | None) -> None:
        self.__dict__["_epoch"] = value

    def poisson_sample(self, rate: float, generator: torch.Generator) -> tuple[torch.Tensor, ...]:
        """A Poisson sample: each example independently with probability ``rate``, in
        shard order, so the batch's size varies (possibly 0). One uniform per example from
        the client's own RNG, drawn on the CPU in float64 so that the inclusion
        probability is ``rate`` to 2⁻⁵³ (it is what a privacy accountant is told)."""
        keep = torch.rand(len(self), generator=generator, dtype=torch.float64) < rate
        return self.rows(keep.nonzero().squeeze(1).to(self.x.device))

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """The batch of the examples ``idx`` (what a model's loss takes): drawn at random
        by :meth:`sample`, or in order by a strategy that visits the whole shard."""
        return self.x[idx], self.y[idx]

    def stack(self, batches: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        """Batches of several clients (of this kind of data) as one batch with a leading
        client axis: what batched execution feeds one stacked forward pass."""
        return tuple(torch.stack(parts) for parts in zip(*batches, strict=True))

    @classmethod
    def gather(cls, store: dict[str, torch.Tensor],
               idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Every row's batch of examples ``idx[row]`` (``[rows, batch]``) from the stacked
        shards ``store`` (:attr:`PER_EXAMPLE` → ``[rows, largest shard, …]``): what
        :meth:`stack` makes of each row's :meth:`rows`, in one gather per tensor."""
        rows = torch.arange(idx.shape[0], device=idx.device)[:, None]
        return store["x"][rows, idx], store["y"][rows, idx]


class Task(ABC):
    # what evaluate() returns, declared so a config naming a metric can be checked early
    METRICS: ClassVar[tuple[str, ...]] = ("loss",)
    """A dataset, its partition across clients, a loss and an evaluation."""

    name: str

    @abstractmethod
    def model_spec(self) -> dict[str, Any]:
        """What a model builder needs to know (input size, number of classes...)."""

    @abstractmethod
    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        """The training shard of every data-holding client (deterministic in the seed)."""

    @abstractmethod
    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Training loss of ``model`` on ``batch`` (a scalar tensor with grad)."""

    def example_losses(self, model: torch.nn.Module,
                       batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """The loss of each example of ``batch`` (one row per example; :meth:`loss` is
        their mean): what a forward pass over several clients' batches at once splits back
        into each client's loss. Tasks without it run such clients one at a time."""
        raise NotImplementedError

    def validate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        """The model's loss and accuracy on the task's validation split (``eval.select``);
        a task without one says so (the config refuses the selection before a run)."""
        raise ConfigError("eval.select", f"task {type(self).__name__} has no validation "
                          "split to select on")

    @property
    def splits_losses(self) -> bool:
        return type(self).example_losses is not Task.example_losses

    @abstractmethod
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        """Test metrics of ``model``: always ``loss``; ``accuracy`` for classification,
        ``perplexity`` for language modelling."""

    def public_data(self) -> ClientData | None:
        """Held-out examples that every client may read — no client's training shard — as
        one (CPU) shard, e.g. for a probe set that must not depend on private data; None
        where the task has none."""
        return None


def model_tokenizer(task: str, model_cfg: Any, needs: str, what: str) -> Any:
    """The tokenizer of ``model_cfg``, which task ``task`` needs to be a ``needs`` model
    (``what``, in words): one line naming model.name otherwise."""
    from decent.models.causal_lm import load_tokenizer

    if getattr(model_cfg, "name", None) != needs:
        raise ConfigError("model.name", f"task {task} needs {what}: set model.name={needs}")
    return load_tokenizer(model_cfg)
