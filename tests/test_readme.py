"""The README stays a front page: short, and every link in it leads to a file that exists
(the docs site checks its own links when `make docs` builds it with --strict)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def test_every_relative_link_of_the_readme_exists() -> None:
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links into the docs"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing


def test_every_page_in_the_site_navigation_exists() -> None:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:\n")[1]
    pages = re.findall(r"([\w/-]+\.md)\s*$", nav, re.M)
    assert len(pages) > 40
    assert [p for p in pages if not (ROOT / "docs" / p).is_file()] == []
