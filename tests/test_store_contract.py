"""One contract for both stores: embedded Chroma and a real Chroma server (`chroma run`) behave the same through
the CLI, under concurrent ingests, and for an answer from the real vLLM server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.errors import ConfigError
from rag.wiring import App, build_engine, build_store
from tests.conftest import STORE_MODES, CountingEmbedder, LLMServer, run_in_process

pytestmark = STORE_MODES
Write = Callable[[str, str | bytes], Path]


def test_cli_ingests_and_searches(docs: Path, write: Write, cli_env: dict[str, str], settings: Settings) -> None:
    write("it/vpn.md", "# VPN\nInstall WireGuard and import the company profile to reach the intranet.")
    write("hr/leave.txt", "Staff get 25 days of annual leave per year.")
    ingested = run_in_process("rag-ingest", [str(docs), "--json"], cli_env)
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout.splitlines()[-1])["added"] == 2
    found = run_in_process("rag", ["search", "How many days of leave do I get?", "--json"], cli_env)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["hits"][0]["source"] == "hr/leave.txt"
    assert build_store(settings).count() == 2


def test_concurrent_ingests_are_serialized_and_complete(tmp_path: Path, settings: Settings,
                                                        embedder: CountingEmbedder) -> None:
    folders = []
    for name in ("a", "b", "c"):
        folder = tmp_path / name
        folder.mkdir()
        for i in range(4):
            (folder / f"{name}{i}.md").write_text(f"# {name} {i}\nPolicy {name}-{i}: details about topic {i}.")
        folders.append(folder)
    errors: list[BaseException] = []

    def ingest(folder: Path) -> None:
        try:
            service.sync([folder], settings, embedder=embedder)
        except BaseException as exc:  # reported below: a thread's exception would otherwise be lost
            errors.append(exc)

    threads = [threading.Thread(target=ingest, args=(folder,)) for folder in folders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert errors == []
    assert build_store(settings).count() == 12
    assert len(service.library(App(settings)).documents()) == 12


def test_store_refuses_another_embedding_model(docs: Path, write: Write, settings: Settings,
                                               embedder: CountingEmbedder) -> None:
    write("a.md", "# A\nText.")
    service.sync([docs], settings, embedder=embedder)
    other = settings.model_copy(update={"embed_model": "sentence-transformers/paraphrase-MiniLM-L3-v2"})
    with pytest.raises(ConfigError, match="embed"):
        build_store(other)


@pytest.mark.integration
def test_answer_from_the_real_llm(docs: Path, write: Write, settings: Settings, embedder: CountingEmbedder,
                                  llm_server: LLMServer) -> None:
    write("it/printer.md", "# Printer\nTo replace the toner, open the front door and pull the cartridge out.")
    write("hr/leave.md", "# Leave\nStaff get 25 days of annual leave per year.")
    service.sync([docs], settings, embedder=embedder)
    live = settings.model_copy(update={"llm_base_url": llm_server.settings.llm_base_url})
    answer = build_engine(live, embedder=embedder).ask("How do I replace the toner?", principal=LOCAL_OPERATOR)
    assert answer.answerable and answer.text
    assert answer.sources[0].hit.source == "it/printer.md"
    assert answer.usage.completion_tokens > 0
