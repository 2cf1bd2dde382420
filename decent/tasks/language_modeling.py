"""Causal language modelling on a text corpus: the pretraining task of GASLoC, SPES and
DiLoCo-style experiments.

Documents are tokenized, joined with the EOS token and cut into sequences of ``seq_len``
tokens. Sequences are shuffled with the run seed; a ``val_fraction`` of them is held out
for validation loss and perplexity, the rest are partitioned across clients (IID, or
``contiguous`` blocks of the corpus so each client reads different works — a natural
non-IID split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.schema import at_least, in_range, one_of, text
from decent.tasks.base import ClientData, Task, model_tokenizer
from decent.tasks.corpora import load_corpus
from decent.tasks.partition import hold_out, row_shards
from decent.tasks.raw_data import SOURCES

LM_PARTITIONS = ("iid", "contiguous")


@dataclass
class LanguageModelingConfig:
    name: str = text("lm", nullable=False)
    # shakespeare | bbc_news | text_files | hub:<dataset>[:<config>]
    corpus: str = text("shakespeare", nullable=False)
    # where the corpus comes from; auto: the first that applies
    source: str = one_of(SOURCES, "auto")
    data_dir: str | None = text()  # a folder holding the corpus (offline)
    paths: list[str] = text([], nullable=False)  # for corpus=text_files
    seq_len: int = at_least(2, 128)  # tokens per packed training sequence
    # the share of sequences held out for validation
    val_fraction: float = in_range(0.05, 0, 1, lo_open=True, hi_open=True)
    # keep only the corpus's first tokens (quick runs)
    max_tokens: int | None = at_least(2, None, nullable=True)
    # iid sequences, or contiguous stretches of the corpus per client
    partition: str = one_of(LM_PARTITIONS, "iid")
    eval_batch_size: int = at_least(1, 16)  # sequences per evaluation batch
    # validation sequences per evaluation (None: all)
    max_eval_sequences: int | None = at_least(1, 256, nullable=True)


@dataclass
class SequenceData(ClientData):
    """Fixed-length token sequences; ``y`` is unused (targets are the inputs shifted)."""

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return (self.x[idx],)

    @classmethod
    def gather(cls, store: dict[str, torch.Tensor],
               idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return ClientData.gather(store, idx)[:1]


class LanguageModelingTask(Task):
    METRICS = ("loss", "perplexity")
    name = "lm"

    def __init__(self, cfg: LanguageModelingConfig, seed: int, model_cfg: Any) -> None:
        self.tokenizer = model_tokenizer("lm", model_cfg, "causal_lm",
                                         "a causal language model")
        self.cfg = cfg
        self.seed = seed
        corpus = load_corpus(cfg.corpus, cfg.source, cfg.data_dir, list(cfg.paths) or None)
        self.data_source = corpus.source
        tokens = self.tokenize(corpus.documents)
        n_seq = len(tokens) // cfg.seq_len
        val_idx, train_idx = hold_out(n_seq, cfg.val_fraction, seed, "task.seq_len",
                                      f"the corpus has only {len(tokens)} tokens: too few "
                                      f"for sequences of {cfg.seq_len}")
        seqs = torch.from_numpy(tokens[: n_seq * cfg.seq_len].reshape(n_seq, cfg.seq_len))
        self.val = seqs[val_idx]
        self.train = seqs[train_idx]  # corpus order kept: 'contiguous' relies on it
        self.num_tokens = len(tokens)

    def tokenize(self, documents: list[str]) -> np.ndarray:
        tok = self.tokenizer
        eos = tok.eos_token_id
        out: list[int] = []
        for doc in documents:
            out.extend(tok(doc, add_special_tokens=False)["input_ids"])
            out.append(eos)
            if self.cfg.max_tokens is not None and len(out) >= self.cfg.max_tokens:
                out = out[: self.cfg.max_tokens]
                break
        return np.asarray(out, dtype=np.int64)

    def model_spec(self) -> dict[str, Any]:
        return {"vocab_size": len(self.tokenizer)}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        return row_shards(self.train, holders, device, self.seed,
                          shuffle=self.cfg.partition == "iid", what="sequences",
                          fix="use a shorter task.seq_len or a larger corpus",
                          data=SequenceData)

    def public_data(self) -> ClientData:
        """The validation sequences (held out of every shard)."""
        return SequenceData(self.val, torch.zeros(len(self.val), dtype=torch.long))

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        (ids,) = batch
        logits = model(input_ids=ids).logits
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())

    def example_losses(self, model: torch.nn.Module,
                       batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        """Each sequence's next-token losses (its row; every row as long)."""
        (ids,) = batch
        logits = model(input_ids=ids).logits
        return F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(),
                               reduction="none").view(ids.shape[0], -1)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        model.eval()
        val = self.val[: self.cfg.max_eval_sequences]
        total, count = 0.0, 0
        for start in range(0, len(val), self.cfg.eval_batch_size):
            ids = val[start: start + self.cfg.eval_batch_size].to(device)
            logits = model(input_ids=ids).logits[:, :-1].float()
            total += float(F.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten(),
                                           reduction="sum"))
            count += ids[:, 1:].numel()
        loss = total / count
        return {"loss": loss, "perplexity": math.exp(min(loss, 50.0))}
