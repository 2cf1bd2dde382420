"""ReCoRD (Zhang et al., 2018) by candidate scoring, in MeZO's format.

An example is a news passage, a cloze query with an ``@placeholder``, the passage's
entities (the candidates) and the entities that fill it (the answers). MeZO's template
(princeton-nlp/MeZO, ``large_models/templates.py``, ``ReCoRDTemplateGPT3``) reads the
passage with each ``@highlight`` line as a ``- `` bullet, then ``\\n-``; a candidate's
option is `` <the query with the candidate in its place>``. A candidate's score is the
mean log-likelihood of its option's tokens given the context (MeZO's ``run.py``, the
``log_probs.mean()`` of each option, no calibration), the prediction the best-scoring
candidate, the training loss the cross-entropy of the scores against the first answer
(MeZO's classification-style training), and the metrics MeZO's ``metrics.py`` computes:
``accuracy`` (the prediction is an answer) and ``f1`` (the best token F1 against the
answers, after SQuAD's normalisation).

Files: the official SuperGLUE JSONL (a passage a line, its ``qas`` the queries;
entities and answers as character spans, ``end`` inclusive) in
``<task.data_dir>/record/{train,val}.jsonl``, or the hub's ``super_glue/record`` (one
query a row). Where only the context and an option are tokenized apart and joined, the
option's tokens are exactly its own (MeZO tokenizes the joined text and counts the
option's tokens as the difference of the lengths).
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from decent.core.errors import ConfigError
from decent.core.schema import at_least, one_of, text
from decent.tasks.base import ClientData, Task
from decent.tasks.partition import partition
from decent.tasks.prompted import SAMPLINGS

RECORD_SOURCES = ("auto", "local", "hub")


@dataclass
class RecordConfig:
    name: str = text("record", nullable=False)  # the task: record
    # local: task.data_dir; hub: super_glue/record; auto: local where data_dir is set
    source: str = one_of(RECORD_SOURCES, "auto")
    data_dir: str | None = text()  # a folder holding record/train.jsonl and val.jsonl
    num_train: int = at_least(1, 1024)  # training queries, partitioned across clients
    num_val: int = at_least(0, 500)  # validation queries (from the train file)
    num_test: int = at_least(1, 1000)  # test queries (from the val file)
    max_length: int = at_least(8, 256)  # tokens of context + option; the passage is cut
    eval_batch_size: int = at_least(1, 4)  # queries per evaluation batch
    # how a client's batches are drawn: replacement, or epoch (each query once an epoch)
    sampling: str = one_of(SAMPLINGS, "replacement")


def entity_texts(text_: str, spans: list[dict]) -> list[str]:
    """The distinct strings of ``spans`` (``end`` inclusive), in order of appearance."""
    return list(dict.fromkeys(text_[s["start"]: s["end"] + 1] for s in spans))


def official_rows(raw: dict) -> list[dict]:
    """One official SuperGLUE line (a passage and its queries) as one row a query."""
    passage = raw["passage"]
    entities = entity_texts(passage["text"], passage["entities"])
    return [{"passage": passage["text"], "query": qa["query"], "entities": entities,
             "answers": list(dict.fromkeys(a["text"] for a in qa.get("answers", [])))}
            for qa in raw["qas"]]


def read_record(path: Path) -> list[dict]:
    rows: list[dict] = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                raw = json.loads(line)
                rows.extend(official_rows(raw) if "qas" in raw else [raw])
            except (json.JSONDecodeError, KeyError, TypeError) as exc:
                raise ConfigError("task.data_dir", f"{path} line {lineno} is not a ReCoRD "
                                  f"row ({type(exc).__name__}: {exc})") from None
    return [r for r in rows if r["answers"] and r["entities"]]


def load_rows(cfg: RecordConfig) -> tuple[list[dict], list[dict]]:
    """(train rows, held-out rows)."""
    if cfg.source == "hub" or (cfg.source == "auto" and cfg.data_dir is None):
        from datasets import load_dataset

        data = load_dataset("super_glue", "record")
        return ([dict(r) for r in data["train"]], [dict(r) for r in data["validation"]])
    if cfg.data_dir is None:
        raise ConfigError("task.data_dir", "task.source local reads the official SuperGLUE "
                          "files: set task.data_dir to a folder with record/train.jsonl and "
                          "val.jsonl (or task.source=hub)")
    folder = Path(cfg.data_dir) / "record"
    files = [folder / "train.jsonl", folder / "val.jsonl"]
    missing = [f for f in files if not f.is_file()]
    if missing:
        raise ConfigError("task.data_dir", f"no ReCoRD file {missing[0]}: download SuperGLUE "
                          "ReCoRD (train.jsonl, val.jsonl)")
    return read_record(files[0]), read_record(files[1])


def context(row: dict) -> str:
    """MeZO's ``ReCoRDTemplateGPT3.encode``."""
    return row["passage"].replace("@highlight\n", "- ") + "\n-"


def option(row: dict, candidate: str) -> str:
    """What ``verbalize`` adds to the context: the query with ``candidate`` in its place."""
    return " " + row["query"].replace("@placeholder", candidate)


def normalize_answer(s: str) -> str:
    """SQuAD's normalisation, as MeZO's metrics.py writes it."""
    s = "".join(ch for ch in s.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", s).split())


def token_f1(prediction: str, answers: list[str]) -> float:
    best = 0.0
    for answer in answers:
        pred, gold = normalize_answer(prediction).split(), normalize_answer(answer).split()
        same = sum((Counter(pred) & Counter(gold)).values())
        if same:
            p, r = same / len(pred), same / len(gold)
            best = max(best, 2 * p * r / (p + r))
    return best


@dataclass
class CandidateData(ClientData):
    """Queries with every candidate's context + option: ``x`` [n, C, L] token ids,
    ``lengths`` and ``options`` [n, C] (a padded candidate has length 0), ``y`` the first
    answer's candidate, ``gold`` [n, C] every answer's."""

    lengths: torch.Tensor | None = None
    options: torch.Tensor | None = None
    gold: torch.Tensor | None = None

    PER_EXAMPLE: ClassVar[tuple[str, ...]] = ("x", "y", "lengths", "options", "gold")

    def rows(self, idx: torch.Tensor) -> tuple[torch.Tensor, ...]:
        assert self.lengths is not None and self.options is not None and self.gold is not None
        lengths = self.lengths[idx]
        width = max(int(lengths.max()), 1)
        return (self.x[idx, :, :width], lengths, self.options[idx], self.gold[idx],
                self.y[idx])


class RecordTask(Task):
    METRICS = ("accuracy", "f1", "loss")

    def __init__(self, cfg: RecordConfig, seed: int, model_cfg: Any) -> None:
        from decent.models.causal_lm import load_tokenizer

        if getattr(model_cfg, "name", None) != "causal_lm":
            raise ConfigError("model.name", "task record scores candidates with a causal "
                              "language model: set model.name=causal_lm")
        self.name, self.cfg, self.seed = cfg.name, cfg, seed
        self.tokenizer = load_tokenizer(model_cfg)
        train, held_out = load_rows(cfg)
        rng = np.random.default_rng(seed)
        order = rng.permutation(len(train))
        test = [held_out[i] for i in rng.permutation(len(held_out))[: cfg.num_test]]
        val = [train[i] for i in order[: cfg.num_val]]
        picked = [train[i] for i in order[cfg.num_val: cfg.num_val + cfg.num_train]]
        if len(picked) < cfg.num_train:
            raise ConfigError("task.num_train", f"record has {len(picked)} training queries "
                              f"left after the validation split, fewer than {cfg.num_train}")
        self.train, self.val, self.held_out = map(self.encode, (picked, val, test))
        self.test_rows = test

    def encode(self, rows: list[dict]) -> CandidateData:
        tok = self.tokenizer
        width = max(len(r["entities"]) for r in rows) if rows else 1
        seqs: list[list[list[int]]] = []
        opts: list[list[int]] = []
        for row in rows:
            head = tok(context(row), add_special_tokens=True)["input_ids"]
            mine, lens = [], []
            for cand in row["entities"]:
                tail = tok(option(row, cand), add_special_tokens=False)["input_ids"]
                keep = max(self.cfg.max_length - len(tail), 1)
                mine.append((head[-keep:] + tail)[-self.cfg.max_length:])
                lens.append(min(len(tail), self.cfg.max_length - 1))
            seqs.append(mine)
            opts.append(lens)
        longest = max((len(s) for ss in seqs for s in ss), default=1)
        x = torch.full((len(rows), width, longest), tok.pad_token_id, dtype=torch.long)
        lengths = torch.zeros((len(rows), width), dtype=torch.long)
        options = torch.zeros((len(rows), width), dtype=torch.long)
        gold = torch.zeros((len(rows), width), dtype=torch.bool)
        for i, (row, ss) in enumerate(zip(rows, seqs, strict=True)):
            for c, s in enumerate(ss):
                x[i, c, : len(s)] = torch.tensor(s)
                lengths[i, c], options[i, c] = len(s), opts[i][c]
                gold[i, c] = row["entities"][c] in row["answers"]
        y = gold.float().argmax(dim=1)
        return CandidateData(x, y, lengths, options, gold)

    def model_spec(self) -> dict[str, Any]:
        return {"vocab_size": len(self.tokenizer), "num_classes": 1}

    def client_data(self, holders: list[int], device: torch.device) -> dict[int, ClientData]:
        parts = partition(self.train.y.numpy(), len(holders), "iid", 1.0, self.seed)
        data = self.train
        out: dict[int, ClientData] = {}
        for cid, idx in zip(holders, parts, strict=True):
            shard = CandidateData(*(t[torch.from_numpy(idx)].to(device) for t in (
                data.x, data.y, data.lengths, data.options, data.gold)))  # type: ignore[union-attr]
            shard.sampling = self.cfg.sampling
            out[cid] = shard
        return out

    def scores(self, model: nn.Module, ids: torch.Tensor, lengths: torch.Tensor,
               options: torch.Tensor) -> torch.Tensor:
        """[b, C] the mean log-likelihood of each candidate's option tokens (−inf for a
        padded candidate); the head is applied at the option positions only."""
        from decent.models.label_logits import _unwrap, backbone

        b, c, width = ids.shape
        flat_ids, flat_len = ids.reshape(b * c, width), lengths.reshape(-1)
        live = flat_len > 0
        pos = torch.arange(width, device=ids.device)
        mask = (pos[None, :] < flat_len[:, None]).long()
        out = backbone(model)(input_ids=flat_ids[live], attention_mask=mask[live],
                              use_cache=False)
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        n_opt, lens = options.reshape(-1)[live], flat_len[live]
        # position p predicts token p + 1: an option's tokens are lens − n .. lens − 1
        starts = lens - n_opt - 1
        rows = torch.repeat_interleave(torch.arange(len(lens), device=ids.device), n_opt)
        offsets = torch.arange(int(n_opt.sum()), device=ids.device) - torch.repeat_interleave(
            torch.cumsum(n_opt, 0) - n_opt, n_opt)
        at = starts[rows] + offsets
        logits = _unwrap(model).get_output_embeddings()(hidden[rows, at]).float()
        picked = logits.log_softmax(-1).gather(1, flat_ids[live][rows, at + 1, None])[:, 0]
        mean = torch.zeros(len(lens), device=ids.device).index_add(0, rows, picked) / n_opt
        full = torch.full((b * c,), float("-inf"), device=ids.device)
        full[live] = mean
        return full.view(b, c)

    def loss(self, model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        ids, lengths, options, _, y = batch
        return F.cross_entropy(self.scores(model, ids, lengths, options), y)

    def evaluate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        return self.score(model, device, self.held_out, self.test_rows)

    def validate(self, model: nn.Module, device: torch.device) -> dict[str, float]:
        return {k: v for k, v in self.score(model, device, self.val, None).items()
                if k in ("accuracy", "loss")}

    @torch.no_grad()
    def score(self, model: nn.Module, device: torch.device, data: CandidateData,
              rows: list[dict] | None) -> dict[str, float]:
        model.eval()
        correct, f1, loss = 0.0, 0.0, 0.0
        bs = self.cfg.eval_batch_size
        for start in range(0, len(data), bs):
            idx = torch.arange(start, min(start + bs, len(data)))
            ids, lengths, options, gold, y = (t.to(device) for t in data.rows(idx))
            s = self.scores(model, ids, lengths, options)
            pred = s.argmax(dim=1)
            correct += float(gold[torch.arange(len(idx)), pred].sum())
            loss += float(F.cross_entropy(s, y, reduction="sum"))
            if rows is not None:
                for k, i in enumerate(idx.tolist()):
                    f1 += token_f1(rows[i]["entities"][int(pred[k])], rows[i]["answers"])
        n = max(len(data), 1)
        out = {"accuracy": correct / n, "loss": loss / n}
        if rows is not None:
            out["f1"] = f1 / n
        return out
