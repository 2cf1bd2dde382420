"""``strategy.layers``: which weights SeedFlood's SubCGE perturbs. ``all_2d`` (Algorithm 1:
every 2-D layer, the embeddings and a head tied to them included) trains what a refresh
folds into the shared weights; ``linear`` leaves embeddings and head frozen. Batched
runs match sequential ones through the label-word head; old records, saved before the
field, read back as they were made (``linear``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from torch import nn

from decent.backends.local import local_engine
from decent.core.errors import ConfigError
from decent.engine.config import from_dict, to_dict
from decent.engine.saved import load_saved_config
from decent.engine.stacked_zo import LOSS_RTOL
from decent.run.runner import run
from decent.zo import subcge
from tests.helpers import tiny


def sst2_folder(tmp_path: Path) -> Path:
    words = ["good", "bad", "a truly wonderful film", "dull", "not worth it", "fine"]
    folder = tmp_path / "data" / "sst2"
    folder.mkdir(parents=True, exist_ok=True)
    for split, count in (("train", 32), ("dev", 12)):
        rows = [{"sentence": words[i % len(words)], "label": i % 2} for i in range(count)]
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "data"


def flood(tmp_path: Path, mode: str = "sequential", **strategy) -> dict:
    return tiny(
        tmp_path, rounds=3, topology={"name": "ring", "n": 4},
        task={"name": "sst2", "data_dir": str(sst2_folder(tmp_path)), "num_train": 32,
              "num_val": 0, "num_test": 12, "max_length": 16},
        model={"name": "causal_lm", "path": "tiny-llama"},
        strategy={"name": "seedflood", "lr": 1e-3, "eps": 1e-3, "batch_size": 4, "rank": 4,
                  **strategy},
        eval={"every": 1, "per_client": False}, execution={"mode": mode})


def test_batched_all_2d_seedflood_matches_sequential_through_the_label_word_head(tmp_path):
    """Prompted classification reads label-word rows of a head tied to the perturbed
    embedding: batched, every row's loss within the stacked tolerance of sequential and
    the accuracy, bytes and messages exactly."""
    seq = run(from_dict(flood(tmp_path, "sequential"))).rows
    bat = run(from_dict(flood(tmp_path, "batched"))).rows
    approx = {"loss", "gmp_loss", "round_wall_s"}
    for a, b in zip(seq, bat, strict=True):
        assert {k: v for k, v in a.items() if k not in approx} == \
            {k: v for k, v in b.items() if k not in approx}
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL)
        assert b["gmp_loss"] == pytest.approx(a["gmp_loss"], rel=LOSS_RTOL)


@pytest.mark.parametrize("layers", ["all_2d", "linear"])
def test_a_refresh_folds_into_the_embeddings_only_under_all_2d(tmp_path, layers):
    """After a refresh (τ = 1) the shared weights hold U A Vᵀ: the embedding matrix (and
    the head, the same tensor) has moved under all_2d and is untouched under linear, where
    every Linear but the head moves."""
    engine = local_engine(from_dict(flood(tmp_path, layers=layers, refresh_every=1)))
    model = engine.group.clients[0].model
    embed, head = model.get_input_embeddings(), model.get_output_embeddings()
    before_embed = embed.weight.detach().clone()
    before_q = model.model.layers[0].self_attn.q_proj.weight.detach().clone()
    for r in range(2):
        engine.run_round(r)
    assert head.weight is embed.weight  # still one matrix
    assert (not torch.equal(embed.weight, before_embed)) == (layers == "all_2d")
    assert not torch.equal(model.model.layers[0].self_attn.q_proj.weight, before_q)


def test_layers_is_refused_where_it_chooses_nothing(tmp_path):
    with pytest.raises(ConfigError, match=r"strategy\.layers.*estimator mezo"):
        from_dict(flood(tmp_path, estimator="mezo", layers="linear"))
    with pytest.raises(ConfigError, match=r"strategy\.layers.*choose one of"):
        from_dict(flood(tmp_path, layers="embeddings"))


def test_an_embedding_whose_indices_subcge_cannot_read_is_named():
    class Hashed(nn.Embedding):
        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            return super().forward(ids % self.num_embeddings)

    model = nn.Sequential(Hashed(10, 4), nn.Linear(4, 2))
    with pytest.raises(ConfigError, match=r"strategy\.layers: all_2d: the embedding 0 "
                                          r"\(Hashed\).*use strategy.layers linear"):
        subcge.SubspaceBasis(model, rank=2, seed=0)
    assert subcge.SubspaceBasis(model, rank=2, seed=0, layers="linear").names == ["1"]


@pytest.mark.parametrize(("strategy", "read"), [
    ({}, "linear"),  # saved before the field: made with SubCGE over the Linear layers
    ({"layers": "all_2d"}, "all_2d"),  # saved with it: as written
    ({"estimator": "mezo"}, "all_2d"),  # dense MeZO perturbs everything: nothing to fill
])
def test_a_saved_config_from_before_the_field_reads_back_as_it_was_made(tmp_path, strategy,
                                                                        read):
    saved = to_dict(from_dict(flood(tmp_path, **strategy)))
    if "layers" not in strategy:
        del saved["strategy"]["layers"]
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(saved))
    assert load_saved_config(path).strategy.layers == read
