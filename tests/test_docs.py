"""The README and docs/ stay true: every relative link names a file that exists and every anchor a heading there."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.*)$")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def outside_code(text: str) -> list[str]:
    """The lines of a Markdown text that are not inside fenced code."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """The anchors of a Markdown file's headings."""
    return {slug(match[1]) for line in outside_code(path.read_text(encoding="utf-8"))
            if (match := HEADING.match(line))}


def broken_links(path: Path) -> list[str]:
    """The relative links of one file whose file or anchor does not exist."""
    broken = []
    for line in outside_code(path.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z]+:", target):
                continue
            file_part, _, anchor = target.partition("#")
            linked = (path.parent / file_part).resolve() if file_part else path
            if not linked.exists() or (anchor and linked.suffix == ".md" and anchor not in anchors(linked)):
                broken.append(target)
    return broken


def test_every_link_and_anchor_of_the_docs_resolves() -> None:
    assert {path.name: broken for path in DOCS if (broken := broken_links(path))} == {}


def test_the_readme_opens_with_the_two_commands_and_stays_short() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = readme.split("```", 2)[1]
    assert [line.split()[:2] for line in first_block.splitlines() if line.startswith("make")] == [
        ["make", "demo"], ["make", "test"]]
    assert len(readme.splitlines()) < 150


def test_a_broken_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title `x`: y\n\n[ok](#title-x-y) [bad](#nowhere) [gone](b.md)\n")
    assert broken_links(tmp_path / "a.md") == ["#nowhere", "b.md"]
