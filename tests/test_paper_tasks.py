"""The SeedFlood paper's tasks in MeZO's format: each prompt, with its label word, is the
text MeZO's templates write (princeton-nlp/MeZO, large_models/templates.py, transcribed
here as the reference), MultiRC is read at the answer level, and the shipped SuperGLUE
files load with their published sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from decent.tasks.catalog import CATALOG, multirc_answers
from decent.tasks.local_files import load_local

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


# --- MeZO's templates (large_models/templates.py), verbalize(sample, candidate) -------------
def mezo_sst2(d, label):
    return f"{d['sentence'].strip()} It was {({0: 'terrible', 1: 'great'})[label]}"


def mezo_rte(d, label):
    return (f"{d['premise']}\nDoes this mean that \"{d['hypothesis']}\" is true? Yes or No?\n"
            f"{({0: 'Yes', 1: 'No'})[label]}")


def mezo_boolq_v3(d, label):  # BoolQDataset.get_template's default (template_version=2)
    question = d["question"]
    if not question.endswith("?"):
        question = question + "?"
    question = question[0].upper() + question[1:]
    return f"{d['passage']} {question}\n{'Yes' if label else 'No'}"


def mezo_wic(d, label):
    return (f"Does the word \"{d['word']}\" have the same meaning in these two sentences? "
            f"Yes, No?\n{d['sentence1']}\n{d['sentence2']}\n{({0: 'No', 1: 'Yes'})[label]}")


def mezo_multirc(d, label):
    return (f"{d['paragraph']}\nQuestion: {d['question']}\nI found this answer "
            f"\"{d['answer']}\". Is that correct? Yes or No?\n{({0: 'No', 1: 'Yes'})[label]}")


EXAMPLES = {
    "sst2": ({"sentence": "a gorgeous , witty , seductive movie . "}, mezo_sst2),
    "rte": ({"premise": "Dana Reeve, the widow of the actor Christopher Reeve, has died.",
             "hypothesis": "Christopher Reeve had an accident."}, mezo_rte),
    "boolq": ({"passage": "Persian language -- Persian is a Western Iranian language.",
               "question": "do iran and afghanistan speak the same language"}, mezo_boolq_v3),
    "wic": ({"word": "place", "sentence1": "Do you want to come over to my place later?",
             "sentence2": "A political system with no place for the less prominent groups."},
            mezo_wic),
    "multirc": ({"paragraph": "Sent 1: The bird flew.\nSent 2: It was red.",
                 "question": "What color was the bird?", "answer": "Red"}, mezo_multirc),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
@pytest.mark.parametrize("label", [0, 1])
def test_a_prompt_and_its_label_word_are_mezos_text(name, label):
    row, reference = EXAMPLES[name]
    spec = CATALOG[name]
    # SST-2's label word carries its leading space; MeZO's f-string writes the space
    assert spec.prompt(row) + spec.label_words[label] == reference(row, label)


def test_a_boolq_question_already_asked_keeps_its_mark():
    row = {"passage": "P.", "question": "Is it?"}
    assert CATALOG["boolq"].prompt(row) == "P. Is it?\n"


def test_a_multirc_paragraph_is_one_example_per_answer_option():
    raw = {"idx": 0, "version": 1.1, "passage": {"text": "Para.", "questions": [
        {"question": "Q1?", "idx": 0, "answers": [{"text": "a", "idx": 0, "label": 1},
                                                   {"text": "b", "idx": 1, "label": 0}]},
        {"question": "Q2?", "idx": 1, "answers": [{"text": "c", "idx": 2, "label": 0}]}]}}
    assert multirc_answers(raw) == [
        {"paragraph": "Para.", "question": "Q1?", "answer": "a", "label": 1},
        {"paragraph": "Para.", "question": "Q1?", "answer": "b", "label": 0},
        {"paragraph": "Para.", "question": "Q2?", "answer": "c", "label": 0}]
    flat = {"paragraph": "P", "question": "Q", "answer": "A", "label": 1}  # the hub's rows
    assert multirc_answers(flat) == [flat]


@pytest.mark.skipif(not SHARED.is_dir(), reason="the shared SuperGLUE files are not here")
@pytest.mark.parametrize(("name", "train", "held_out", "positives"), [
    ("wic", 5_428, 638, 2_714), ("multirc", 27_243, 4_848, 12_025)])
def test_the_shipped_files_load_with_their_published_sizes(name, train, held_out, positives):
    data = load_local(name, CATALOG[name], SHARED)
    assert len(data.train) == train and len(data.eval) == held_out
    assert sum(r["label"] for r in data.train) == positives


def test_epoch_sampling_takes_each_example_once_an_epoch_in_a_fresh_order():
    import torch

    from decent.tasks.base import ClientData

    data = ClientData(torch.arange(10.0).unsqueeze(1), torch.arange(10))
    data.sampling = "epoch"
    gen = torch.Generator().manual_seed(7)
    ref = torch.Generator().manual_seed(7)
    first, second = torch.randperm(10, generator=ref), torch.randperm(10, generator=ref)
    draws = [data.draw(4, gen) for _ in range(5)]  # 20 = two epochs exactly
    assert torch.equal(torch.cat(draws), torch.cat([first, second]))
    assert torch.equal(draws[2], torch.cat([first[8:], second[:2]]))  # a batch across the end
    assert data.epoch[1] == 10
    replacement = ClientData(torch.zeros(10, 1), torch.arange(10))
    again = torch.Generator().manual_seed(7)
    assert torch.equal(replacement.draw(4, torch.Generator().manual_seed(7)),
                       torch.randint(10, (4,), generator=again))


def test_a_checkpoint_keeps_where_each_client_is_in_its_epoch(tmp_path):
    """The sampler's order and place are in a client's saved state: a group loaded from
    it draws the batches the saved one goes on to draw."""
    import torch

    from decent.engine.config import from_dict
    from tests.helpers import tiny
    from tests.test_batched import group_after

    def epoch_group():
        group = group_after(from_dict(tiny(tmp_path)), 0)
        for c in group.clients.values():
            c.data.sampling = "epoch"
        return group

    group = epoch_group()
    for c in group.clients.values():
        c.data.draw(7, c.generator)
    saved = group.save_clients()
    assert saved[0]["sampler"]["at"] == 7
    other = epoch_group()
    other.load(saved, group.save_process())
    for cid, c in group.clients.items():
        torch.testing.assert_close(other.clients[cid].data.draw(300, other.clients[cid].generator),
                                   c.data.draw(300, c.generator), rtol=0, atol=0)


def test_what_a_task_answers_of_itself_is_a_value_not_a_method():
    """``splits_losses`` is read as a flag by batched execution (a bound method would be
    truthy for every task): it is a property, True exactly where a task splits its loss."""
    from decent.tasks.base import Task
    from decent.tasks.prompted import PromptedTask
    from decent.tasks.record import RecordTask
    from decent.tasks.registry import TASKS

    assert isinstance(Task.__dict__["splits_losses"], property)
    for name in TASKS.names:
        cls = TASKS.entry(name).build
        answer = Task.splits_losses.fget(cls.__new__(cls))
        assert answer is (cls.example_losses is not Task.example_losses), name
    assert Task.splits_losses.fget(PromptedTask.__new__(PromptedTask)) is True
    assert Task.splits_losses.fget(RecordTask.__new__(RecordTask)) is False
