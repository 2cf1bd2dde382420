"""ReCoRD by candidate scoring, on a small file written in the official SuperGLUE format
(tests/data/record): the official rows become one example a query, the text a candidate is
scored on is MeZO's template's, each candidate's score is the mean log-likelihood of its
option's tokens (checked against a full forward), and a run trains and reports accuracy
and F1."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from decent.engine.config import from_dict
from decent.run.runner import run
from decent.tasks.record import context, normalize_answer, option, read_record, token_f1
from tests.helpers import tiny
from tests.test_batched import group_after

DATA = Path(__file__).resolve().parent / "data"


def record_config(tmp_path, **over):
    return from_dict(tiny(
        tmp_path, rounds=2, topology={"name": "complete", "n": 2},
        strategy={"name": "dsgd", "local_steps": 1, "batch_size": 2, "lr": 0.01},
        task={"name": "record", "data_dir": str(DATA), "num_train": 4, "num_val": 2,
              "num_test": 4, "max_length": 96, **over},
        model={"name": "causal_lm", "path": "tiny-llama"},
        eval={"every": 1, "per_client": False}))


def test_an_official_line_is_one_example_a_query():
    rows = read_record(DATA / "record" / "train.jsonl")
    assert len(rows) == 6
    assert rows[0]["entities"] == ["Paris", "CNN", "Marie Curie", "Pierre Curie",
                                   "Nobel Prize"]
    assert rows[0]["answers"] == ["Marie Curie"] and rows[1]["answers"] == ["Paris"]
    assert rows[0]["query"] == "@placeholder won the prize for physics in 1903."


def test_the_scored_text_is_mezos_template():
    row = read_record(DATA / "record" / "train.jsonl")[0]
    # MeZO's ReCoRDTemplateGPT3.verbalize, transcribed
    passage = row["passage"].replace("@highlight\n", "- ")
    mezo = f"{passage}\n- {row['query'].replace('@placeholder', 'Pierre Curie')}"
    assert context(row) + option(row, "Pierre Curie") == mezo
    assert context(row).endswith("\n-") and "@highlight" not in context(row)


def test_f1_and_normalisation_are_squads():
    assert normalize_answer("The  Nobel Prize!") == "nobel prize"
    assert token_f1("Marie Curie", ["Curie"]) == pytest.approx(2 / 3)
    assert token_f1("Paris", ["Rome", "the Paris"]) == 1.0


def test_a_candidates_score_is_its_options_mean_log_likelihood(tmp_path):
    group = group_after(record_config(tmp_path), 0)
    task, model = group.task, group.base_model
    ids, lengths, options, _, _ = task.held_out.rows(torch.arange(2))
    with torch.no_grad():
        scores = task.scores(model, ids, lengths, options)
        for i in range(2):
            for c in range(ids.shape[1]):
                n, k = int(lengths[i, c]), int(options[i, c])
                if n == 0:
                    assert scores[i, c] == float("-inf")
                    continue
                seq = ids[i, c, :n][None]
                logp = model(input_ids=seq).logits[0].float().log_softmax(-1)
                expected = torch.stack([logp[p, seq[0, p + 1]] for p in range(n - k - 1, n - 1)])
                torch.testing.assert_close(scores[i, c], expected.mean(), rtol=0, atol=1e-5)


def test_a_run_trains_and_reports_accuracy_and_f1(tmp_path):
    result = run(record_config(tmp_path))
    summary = result.summary
    for key in ("gmp_accuracy", "gmp_f1", "gmp_loss"):
        assert summary[key] >= 0 and (key == "gmp_loss" or summary[key] <= 1)
    assert summary["gmp_f1"] >= summary["gmp_accuracy"]  # an exact answer is F1 1
