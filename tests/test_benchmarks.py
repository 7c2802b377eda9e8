"""Benchmarks in their quick mode: each runs to the end and prints its figures (the figures are not judged here)."""

from __future__ import annotations

import pytest

from benchmarks import answers_during_ingest


def test_answers_during_ingest_quick(capsys: pytest.CaptureFixture[str]) -> None:
    answers_during_ingest.main(["--quick"])
    out = capsys.readouterr().out
    assert "ingest through POST /v1/sync: " in out and "p99 during / idle: " in out
