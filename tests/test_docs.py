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


COMMAND = re.compile(r"`(?:RAG_\w+=\S+ )*((?:\.venv/bin/)?rag(?:-ingest)?(?: [^`]*)?)`")


SHELL_LINE = re.compile(r"^\s*(?:\$ )?(?:[A-Z_]+=\S+ )*((?:\.venv/bin/)?rag(?:-ingest)? [^#]*?)\s*(?:#.*)?$")


def fenced_lines(text: str) -> list[str]:
    """The lines inside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            lines.append(line)
    return lines


def documented_commands() -> list[tuple[str, str]]:
    """Every `rag …` and `rag-ingest …` command line the README and docs show, in backticks or on a line of a code
    block: (file, command)."""
    found = []
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        found += [(path.name, match[1]) for match in COMMAND.finditer(text)]
        found += [(path.name, match[1]) for line in fenced_lines(text) if (match := SHELL_LINE.match(line))]
    return found


def unknown_parts(command: str) -> list[str]:
    """The subcommand and option names of a documented command line that the CLI does not have."""
    import click

    from ingest.cli import main as rag_ingest
    from ui.cli import main as rag

    words = command.replace("[", " ").replace("]", " ").replace("|", " ").split()
    program, args = words[0].removeprefix(".venv/bin/"), words[1:]
    cli: click.Command = rag_ingest if program == "rag-ingest" else rag
    if isinstance(cli, click.Group) and args and not args[0].startswith("-") and args[0][:1].isalpha() \
            and not args[0].isupper():
        sub = cli.get_command(click.Context(cli), args[0])
        if sub is None:
            return [args[0]]
        cli, args = sub, args[1:]
    known = {name for param in cli.params for name in (*param.opts, *param.secondary_opts)} | {"-h", "--help"}
    return [arg.split("=")[0] for arg in args if arg.startswith("-") and arg.split("=")[0] not in known]


def test_every_documented_command_names_real_subcommands_and_options() -> None:
    commands = documented_commands()
    assert len(commands) > 30 and any(c.startswith("rag-ingest --watch") for _, c in commands)
    wrong = [f"{name}: `{command}` ({', '.join(parts)})" for name, command in commands
             if (parts := unknown_parts(command))]
    assert not wrong, "\n".join(wrong)


def test_a_documented_option_the_cli_lacks_is_found() -> None:
    assert unknown_parts("rag ask --no-such-flag q") == ["--no-such-flag"]
    assert unknown_parts("rag asks q") == ["asks"]
    assert unknown_parts("rag-ingest --watch FOLDER... [--no-prune]") == []
