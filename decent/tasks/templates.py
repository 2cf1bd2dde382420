"""Prompt templates and label words of the prompted classification tasks.

The SST-2, RTE and BoolQ templates are those of MeZO (Malladi et al., 2023, Appendix E,
Table 16), which the SeedFlood paper reuses: the model reads the prompt and the predicted
class is the label word with the highest next-token log-likelihood.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Template:
    prompt: Callable[[dict], str]
    label_words: tuple[str, ...]  # index = normalised label id (see decent.tasks.sources)


TEMPLATES: dict[str, Template] = {
    # "<S> It was great / terrible"; label 0 = negative, 1 = positive
    "sst2": Template(lambda r: f"{r['sentence'].strip()} It was", (" terrible", " great")),
    "rotten_tomatoes": Template(lambda r: f"{r['sentence'].strip()} It was",
                                (" terrible", " great")),
    # label 0 = entailment → "Yes", 1 = not_entailment → "No"
    "rte": Template(
        lambda r: f'{r["premise"]}\nDoes this mean that "{r["hypothesis"]}" is true? Yes or No?\n',
        ("Yes", "No"),
    ),
    # "<passage> <question>?" → Yes / No; label 0 = False, 1 = True
    "boolq": Template(lambda r: f"{r['passage']} {r['question']}?", (" No", " Yes")),
    # topic classification: labels in decent.tasks.sources order
    "bbc_news": Template(
        lambda r: f"{r['text'].strip()}\nTopic:",
        (" business", " entertainment", " politics", " sport", " tech"),
    ),
}
