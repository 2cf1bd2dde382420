"""What each config field means, read from the comments beside its declaration.

A config dataclass documents a field with a comment on the same line or on the lines just
above it (the convention the schema's modules already follow)::

    # rounds between checkpoints; 0 = none
    every: int = at_least(0, 0)
    keep: int = at_least(1, 2)  # the newest checkpoints kept

The comments stay where a reader of the code sees them; :func:`field_description` makes
them the text of ``decent config schema`` and of the docs' config reference, so those
cannot drift from the code, and a test fails when a field has none.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import textwrap
import tokenize
from functools import cache


def field_description(cls: type, name: str) -> str | None:
    """The comment that documents field ``name`` of dataclass ``cls`` (searched in the
    class that declares it, up the MRO); None when it has none."""
    for klass in inspect.getmro(cls):
        if name in inspect.get_annotations(klass):
            return _class_comments(klass).get(name)
    return None


def described_fields(cls: type) -> list[tuple[dataclasses.Field, str | None]]:
    """Every field of dataclass ``cls`` with its description (None: undocumented)."""
    return [(f, field_description(cls, f.name)) for f in dataclasses.fields(cls)]


@cache
def _class_comments(cls: type) -> dict[str, str]:
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # defined interactively: no source to read
        return {}
    comments: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string.lstrip("#").strip()
    lines = source.splitlines()
    body = ast.parse(source).body[0]
    out: dict[str, str] = {}
    assert isinstance(body, ast.ClassDef)
    for stmt in body.body:
        if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
            continue
        end = stmt.end_lineno or stmt.lineno
        trailing = [comments[k] for k in range(stmt.lineno, end + 1) if k in comments
                    and lines[k - 1].strip() and not lines[k - 1].lstrip().startswith("#")]
        above: list[str] = []
        k = stmt.lineno - 1
        while k >= 1 and lines[k - 1].lstrip().startswith("#"):
            above.insert(0, comments.get(k, ""))
            k -= 1
        text = " ".join(part for part in (*above, *trailing) if part)
        if text:
            out[stmt.target.id] = text
    return out
