"""What the console scripts print of file names, document text, YAML errors and feedback comments is shown as
text: never read as Rich markup (a MarkupError would abort the run) and never as terminal escape sequences."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from rich.console import Console

from ingest.terminal import plain
from rag.components.feedback import Feedback
from rag.config import Settings
from rag.core.sanitize import printable
from rag.wiring import build_feedback_store
from tests.conftest import run_in_process
from tests.test_crash_steps import state

BIN = Path(sys.executable).parent
Write = Callable[[str, str | bytes], Path]
OSC8 = "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
BAD_FRONT_MATTER = '---\ntitle: "Leave" [/x] [red]boom[/red]"\n---\n# Leave\nStaff get 25 days of leave.\n'


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.parametrize("text", ["[/x]", "[red]boom[/red]", "a [link=https://evil.example/]b[/link]",
                                  OSC8 + " end", "\x1b]8;;https://evil.example/\x07click\x1b]8;;\x07",
                                  "bell\x07 back\x08 cr\roverwrite \x9b31m csi \u202eevil.txt"])
def test_plain_text_prints_as_itself_and_moves_no_cursor(text: str) -> None:
    console = Console(record=True, width=200, force_terminal=True, color_system="truecolor")
    console.print(plain(text), highlight=False)
    shown = console.export_text(styles=False)
    raw = console.export_text(styles=True)
    assert shown.rstrip("\n") == printable(text)
    assert "\x1b" not in shown and "\r" not in shown and "\x07" not in shown
    assert "]8;;" not in raw.replace(printable(text), "")  # Rich made no link of it either


def test_printable_keeps_text_and_line_breaks() -> None:
    assert printable("Staff get 25 days.\r\n\tTabs stay.\n") == "Staff get 25 days.\n\tTabs stay.\n"
    assert printable("a\x1b[2Jb\rc") == "a\ufffd[2Jb\ufffdc"


def test_ingest_prints_names_and_yaml_errors_as_text_and_finishes(docs: Path, write: Write,
                                                                 cli_env: dict[str, str], settings: Settings) -> None:
    write("[bold]odd.md", "# Odd\nThe odd page explains the odd procedure.\n")
    write("bad.md", BAD_FRONT_MATTER)
    write("pay.md", "# Pay\nSalaries are paid on the 25th.\n")
    write("pay.md.meta.yaml", "groups: [finance]\n")
    result = run_in_process("rag-ingest", [str(docs)], cli_env)
    assert result.returncode == 1, result.stderr  # one file failed; the run went on to the end
    assert "Traceback" not in result.stderr and "MarkupError" not in result.stderr
    assert "bad.md: invalid YAML front matter" in result.stderr and "[/x] [red]boom[/red]" in result.stderr
    assert "Ingest summary" in result.stdout
    entries = state(settings)["entries"]
    assert set(entries) == {"[bold]odd.md", "pay.md"}
    assert "finance" in str(entries["pay.md"][3])  # the restriction in the same run holds
    write("[red]new[/red].md", "# New\nA new page about the new procedure.\n")
    dry = _run([str(BIN / "rag-ingest"), str(docs), "--dry-run"], {**cli_env, "COLUMNS": "200"})
    assert "[red]new[/red].md" in dry.stdout, dry.stdout  # the plan table shows names as text


def test_feedback_comments_reach_the_operator_s_terminal_as_text(cli_env: dict[str, str], settings: Settings) -> None:
    comment = f"[red]urgent[/red] {OSC8} \x1b[2J"
    build_feedback_store(settings).record(Feedback("a1", -1, "How many leave days? [/x]", "25 [1].",
                                                   comment=comment, user="ann\x1b[8m"))
    result = _run([str(BIN / "rag"), "feedback"], {**cli_env, "COLUMNS": "400", "TERM": "xterm-256color"})
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "[red]urgent[/red]" in result.stdout and "[/x]" in result.stdout and "click here" in result.stdout
    as_json = _run([str(BIN / "rag"), "feedback", "--json"], cli_env)
    assert json.loads(as_json.stdout.splitlines()[0])["comment"] == comment  # what was stored is kept as it was
