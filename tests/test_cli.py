"""The console scripts as a user runs them: --json contracts and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from rag.core.answer import QueryEngine
from tests.conftest import run_in_process
from tests.docs_factory import pdf_bytes

BIN = Path(sys.executable).parent
Write = Callable[[str, str | bytes], Path]


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_ingest_json_contract_and_exit_codes(docs: Path, write: Write, cli_env: dict[str, str]) -> None:
    write("guide.md", "# Printers\nTo add a printer, open Settings and choose Printers.")
    write("manual.pdf", pdf_bytes(["Page one.", "Page two mentions the firmware update."]))
    result = _run([str(BIN / "rag-ingest"), str(docs), "--json"], cli_env)  # the console script itself, once
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) == {"added", "updated", "regrouped", "unchanged", "deleted", "skipped", "failed", "locked",
                            "chunks", "seconds"}
    assert (summary["added"], summary["chunks"], summary["failed"]) == (2, 3, [])

    write("broken.pdf", b"not a pdf at all")
    ran = run_in_process("rag-ingest", [str(docs), "--json"], cli_env)
    assert ran.returncode == 1
    summary = json.loads(ran.stdout.strip().splitlines()[-1])
    assert summary["failed"] == [{"path": "broken.pdf", "error": "not a PDF file (no %PDF header)"}]
    assert (summary["unchanged"], summary["chunks"]) == (2, 3)
    assert "broken.pdf: not a PDF file" in ran.stderr

    search = run_in_process("rag", ["search", "how do I update the firmware", "-k", "2", "--json"], cli_env)
    assert search.returncode == 0, search.stderr
    hits = json.loads(search.stdout.strip().splitlines()[-1])["hits"]
    assert set(hits[0]) == {"source", "page", "score", "chunk_id", "text"}
    assert (hits[0]["source"], hits[0]["page"]) == ("manual.pdf", 2)


def test_dry_run_json_and_usage_errors(docs: Path, write: Write, cli_env: dict[str, str]) -> None:
    write("a.txt", "Alpha.")
    dry = _run([str(BIN / "rag-ingest"), str(docs), "--dry-run", "--json"], cli_env)
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout.strip().splitlines()[-1])["add"] == ["a.txt"]
    assert _run([str(BIN / "rag-ingest"), str(docs / "missing")], cli_env).returncode == 2
    bad_env = {**cli_env, "RAG_CHUNK_TOKENS": "not-a-number"}
    bad = _run([str(BIN / "rag-ingest"), str(docs)], bad_env)
    assert bad.returncode == 2
    assert "RAG_CHUNK_TOKENS" in bad.stderr or "chunk_tokens" in bad.stderr
    too_big = run_in_process("rag-ingest", [str(docs)], {**cli_env, "RAG_CHUNK_TOKENS": "400"})
    assert too_big.returncode == 2
    assert "exceeds what" in too_big.stderr


def test_search_on_empty_index_tells_to_ingest(cli_env: dict[str, str]) -> None:
    result = _run([str(BIN / "rag"), "search", "anything"], cli_env)
    assert result.returncode == 2
    assert "run `rag-ingest PATH` first" in result.stderr


def test_rag_llm_without_vllm_env_says_to_run_setup(cli_env: dict[str, str], tmp_path: Path) -> None:
    env = {**cli_env, "RAG_VLLM_PYTHON": str(tmp_path / "missing" / "python"),
           "RAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"}
    result = _run([str(BIN / "rag"), "llm", "--detach"], env)
    assert result.returncode == 2
    assert "no vLLM environment" in result.stderr and "make setup" in result.stderr


def test_rag_ask_on_empty_index_tells_to_ingest(cli_env: dict[str, str]) -> None:
    result = _run([str(BIN / "rag"), "ask", "anything"], {**cli_env, "RAG_LLM_BASE_URL": "http://127.0.0.1:9/v1"})
    assert result.returncode == 2
    assert "rag-ingest" in result.stderr


def test_rag_ask_json_is_the_api_s_answer_body(tmp_path: Path) -> None:
    """In process, on fakes (click's ctx.obj carries the App): `rag ask --json` prints what /v1/ask returns."""
    from click.testing import CliRunner

    from rag.config import Settings
    from rag.wiring import App
    from tests.fakes import Page, ScriptedChatModel, memory_retriever
    from ui.api.schemas import AskResponse
    from ui.cli import main

    retriever = memory_retriever(Page("hr/leave.md", "Leave", "Staff get 25 days of annual leave per year."))
    engine = QueryEngine(retriever, ScriptedChatModel("Staff get 25 days of annual leave per year [1]."), top_k=1,
                         refusal_threshold=0.1)
    app = App(Settings(data_dir=tmp_path / "data", _env_file=None), engine=engine)  # type: ignore[call-arg]
    result = CliRunner().invoke(main, ["ask", "How many days of annual leave do staff get?", "--json"], obj=app)
    assert result.exit_code == 0, result.output
    body = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(body) == set(AskResponse.model_fields)
    assert AskResponse.model_validate(body).answer == "Staff get 25 days of annual leave per year [1]."
    assert (body["escalate"], body["sources"][0]["snippet"]) == (False, "Leave\nStaff get 25 days of annual leave "
                                                                         "per year.")
