"""MkDocs hooks: the config tables are generated from the code at build time, so the
pages cannot drift from what ``decent run`` accepts.

``<!-- config-reference -->`` becomes every section and field of a run config;
``<!-- config-fields: KIND NAME -->`` (e.g. ``strategy dsgd``) one component's fields.
"""

from __future__ import annotations

import re
from typing import Any

REFERENCE = "<!-- config-reference -->"
FIELDS = re.compile(r"<!-- config-fields: (strategy|task|model) ([a-z0-9_]+) -->")


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    from decent.tools.config_docs import component_markdown, reference_markdown

    if REFERENCE in markdown:
        markdown = markdown.replace(REFERENCE, reference_markdown())
    return FIELDS.sub(lambda m: component_markdown(m.group(1), m.group(2)), markdown)


# Docstrings cross-reference in Sphinx's roles (:class:`~decent.core.graph.GraphFacts`);
# mkdocstrings renders them as text, so the role is dropped and, as Sphinx shows a ``~``
# reference, only the last component is kept.
ROLE = re.compile(r":(?:mod|class|meth|func|attr|data|exc|obj):<code>(~?)([^<]*)</code>")


def on_page_content(html: str, page: Any, config: Any, files: Any) -> str:
    return ROLE.sub(lambda m: f"<code>{m.group(2).rsplit('.', 1)[-1] if m.group(1) else m.group(2)}"
                    "</code>", html)
