"""Preference learning: a reward model trained on (prompt, chosen, rejected) pairs with the
Bradley–Terry loss −log σ(r(prompt ‖ chosen) − r(prompt ‖ rejected)) (Ouyang et al., 2022;
the ASO participants' objective in DSO's report). Metrics: that loss on held-out pairs, and
``accuracy``, the fraction of them whose chosen response gets the higher reward.

``task.pairs`` says where the pairs come from:

* ``shakespeare`` (offline, the default): built from the shipped Shakespeare corpus. Each
  line of verse or prose with at least ``min_words`` words, together with the line before
  it as the prompt, gives one pair: chosen is the line as written, rejected is the same
  line with typos — each letter but the line's first and last character replaced, with
  probability ``typo_rate`` (0.25), by a random lowercase letter ("I am undone: thjre is
  no lovidg, nonu,"). The set is a function of the corpus alone (a fixed generator), so
  every run and every seed sees the same pairs; the run seed only splits and partitions
  them. A reward model that wins here prefers English as written to the same line
  misspelt — a preference with a known right answer, which is what an offline test of
  preference learning needs.
* ``hub:<dataset>[:<config>]``: a public preference set with text columns ``chosen`` and
  ``rejected`` (and optionally ``prompt``), e.g. ``hub:Anthropic/hh-rlhf``, whose columns
  hold whole dialogues sharing the prompt.

Each text is tokenized without special tokens, cut to its last ``max_len`` tokens (the
response is at the end) and right-padded with the pad id; a client's shard holds both
texts of each of its pairs.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from decent.core.errors import ConfigError
from decent.core.schema import at_least, in_range, one_of, text
from decent.models.reward_model import rewards
from decent.tasks.base import ClientData, Task, model_tokenizer
from decent.tasks.corpora import load_corpus
from decent.tasks.hub import hub_train_split
from decent.tasks.partition import hold_out, row_shards
from decent.tasks.raw_data import SOURCES

PAIRS_SEED = 20240601  # the offline set's typos: fixed, so the set never changes
LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass
class PreferenceConfig:
    name: str = text("preference", nullable=False)
    pairs: str = text("shakespeare", nullable=False)  # shakespeare | hub:<dataset>[:<cfg>]
    source: str = one_of(SOURCES, "auto")  # of the Shakespeare corpus
    data_dir: str | None = text()  # a folder holding the corpus (offline)
    max_pairs: int | None = at_least(2, 4000, nullable=True)  # None: every pair
    min_words: int = at_least(1, 6)  # the offline set's shortest line
    typo_rate: float = in_range(0.25, 0, 1, lo_open=True)  # its letters replaced
    max_len: int = at_least(2, 128)  # tokens per prompt ‖ response, the last ones kept
    # the share of pairs held out
    val_fraction: float = in_range(0.1, 0, 1, lo_open=True, hi_open=True)
    eval_batch_size: int = at_least(1, 32)  # pairs per evaluation batch
    max_eval_pairs: int | None = at_least(1, 256, nullable=True)  # None: all

    def validate(self, prefix: str = "task") -> None:
        if self.pairs != "shakespeare" and not is_hub(self.pairs):
            raise ConfigError(f"{prefix}.pairs", f"unknown preference set {self.pairs!r}; "
                              "choose shakespeare or hub:<dataset>[:<config>]")


def is_hub(name: str) -> bool:
    return name == "hub" or name.startswith("hub:")


def shakespeare_pairs(source: str, data_dir: str | None, min_words: int, typo_rate: float,
                      limit: int | None) -> list[tuple[str, str, str]]:
    """(prompt, chosen, rejected) from the Shakespeare corpus (see the module docstring),
    in corpus order: ``limit`` of them spread evenly over the corpus."""
    corpus = load_corpus("shakespeare", source, data_dir)
    candidates = []
    for doc in corpus.documents:
        lines = [line.strip() for line in doc.splitlines()]
        for before, line in itertools.pairwise(lines):
            if before and len(line.split()) >= min_words:
                candidates.append((before, line))
    if limit is not None and len(candidates) > limit:
        keep = np.linspace(0, len(candidates) - 1, limit).round().astype(int)
        candidates = [candidates[i] for i in keep]
    rng = np.random.default_rng(PAIRS_SEED)
    triples = []
    for before, line in candidates:
        chars = list(line)
        while "".join(chars) == line:  # the line's first and last characters stay
            for i in range(1, len(line) - 1):
                if line[i].isalpha() and rng.random() < typo_rate:
                    chars[i] = LETTERS[rng.integers(len(LETTERS))]
        triples.append((before + "\n", line, "".join(chars)))
    return triples


def hub_pairs(name: str, limit: int | None) -> list[tuple[str, str, str]]:
    part, label = hub_train_split(name, "task.pairs", "hub:Anthropic/hh-rlhf",
                                  "use task.pairs=shakespeare")
    missing = [c for c in ("chosen", "rejected") if c not in part.column_names]
    if missing:
        raise ConfigError("task.pairs", f"{label} has no column {', '.join(missing)} "
                          f"(columns: {', '.join(part.column_names)})")
    if limit is not None:
        part = part.select(range(min(limit, len(part))))
    prompts = part["prompt"] if "prompt" in part.column_names else [""] * len(part)
    return [(p, c, r) for p, c, r in zip(prompts, part["chosen"], part["rejected"],
                                         strict=True)
            if isinstance(c, str) and isinstance(r, str) and c != r]


class PreferenceTask(Task):
    METRICS = ("loss", "accuracy")
    name = "preference"

    def __init__(self, cfg: PreferenceConfig, seed: int, model_cfg: Any) -> None:
        self.tokenizer = model_tokenizer("preference", model_cfg, "reward_model",
                                         "a reward model")
        self.cfg = cfg
        self.seed = seed
        cfg.validate()
        if is_hub(cfg.pairs):
            triples = hub_pairs(cfg.pairs, cfg.max_pairs)
        else:
            triples = shakespeare_pairs(cfg.source, cfg.data_dir, cfg.min_words,
                                        cfg.typo_rate, cfg.max_pairs)
        val_idx, train_idx = hold_out(len(triples), cfg.val_fraction, seed, "task.max_pairs",
                                      f"only {len(triples)} pairs: too few to hold some out "
                                      "for validation")
        ids = self.encode(triples)  # [pairs, 2, max_len]
        self.val = ids[val_idx]
        self.train = ids[train_idx]

    def encode(self, triples: list[tuple[str, str, str]]) -> torch.Tensor:
        tok, length = self.tokenizer, self.cfg.max_len
        out = torch.full((len(triples), 2, length), tok.pad_token_id, dtype=torch.long)
        for i, (prompt, chosen, rejected) in enumerate(triples):
            for j, response in enumerate((chosen, rejected)):
                row = tok(prompt + response, add_special_tokens=False)["input_ids"][-length:]
                out[i, j, : len(row)] = torch.tensor(row)
        return out

    def model_spec(self) -> dict[str, Any]:
        return {"vocab_size": len(self.tokenizer)}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        return row_shards(self.train, holders, device, self.seed, shuffle=True, what="pairs",
                          fix="raise task.max_pairs")

    @staticmethod
    def margins(model: torch.nn.Module, pairs: torch.Tensor) -> torch.Tensor:
        """r(chosen) − r(rejected) of each pair."""
        r = rewards(model, pairs.flatten(0, 1)).view(-1, 2)
        return r[:, 0] - r[:, 1]

    def public_data(self) -> ClientData:
        """The held-out pairs (none in any shard)."""
        return ClientData(self.val, torch.zeros(len(self.val), dtype=torch.long))

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return -F.logsigmoid(self.margins(model, batch[0])).mean()

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, device: torch.device) -> dict[str, float]:
        model.eval()
        val = self.val[: self.cfg.max_eval_pairs]
        margins = torch.cat([self.margins(model, val[s: s + self.cfg.eval_batch_size]
                                          .to(device))
                             for s in range(0, len(val), self.cfg.eval_batch_size)])
        return {"loss": float(-F.logsigmoid(margins).mean()),
                "accuracy": float((margins > 0).float().mean())}
