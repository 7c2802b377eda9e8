"""The keyword-write benchmark's quick mode runs and prints its figures (the 100k run is in docs)."""

from __future__ import annotations

import re

import pytest

from benchmarks import keyword_writes


def test_quick_mode_prints_write_and_search_ratios(capsys: pytest.CaptureFixture[str]) -> None:
    keyword_writes.main(["--quick"])
    out = capsys.readouterr().out
    for row in ("add a document, same process", "delete a document, other process", "search p50"):
        line = next(line for line in out.splitlines() if line.startswith(row))
        assert re.fullmatch(r".+?(\s+[\d.]+){3}", line), line  # old, new, old/new
    assert "full compaction" in out
