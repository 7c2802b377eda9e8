"""rag.tools.langchain: the knowledge base as a LangChain retriever, over real MiniLM and real embedded Chroma — the
documents and their metadata, k, access (a reader outside `hr` never gets the `hr` canary, through invoke, ainvoke
and batch), the event loop left free, callbacks, from_settings from RAG_* variables, errors, and docs/langchain.md's
example chain run as written with a fake chat model in place of the LLM server."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.documents import Document

from ingest import service
from rag.config import Settings
from rag.core.access import ANONYMOUS, LOCAL_OPERATOR, Principal
from rag.core.errors import ConfigError, EmptyIndex
from rag.core.ports import Embedder
from rag.tools.langchain import KnowledgeBaseRetriever
from rag.wiring import build_retriever
from tests.conftest import REPO, SAMPLES
from tests.docs_factory import pdf_bytes

UID_QUESTION = "Which UID range does systemd use for dynamic users?"
BONUS_QUESTION = "What is the retention bonus pool for 2027?"
CANARY = "7,340,000"
HR, ENG = Principal("hr", frozenset({"hr"})), Principal("eng", frozenset({"eng"}))


def _documents(folder: Path) -> None:
    """A real sample (Markdown), a two-page PDF, and the canary in a document of group `hr` (sidecar)."""
    (folder / "public").mkdir(parents=True)
    (folder / "hr").mkdir()
    shutil.copy(SAMPLES / "en" / "systemd-uids-gids.md", folder / "public")
    (folder / "public" / "office.pdf").write_bytes(pdf_bytes([
        "Kitchen rules\nPlease empty the dishwasher when it has finished its cycle.",
        "Opening hours\nThe office opens at 8:00 and closes at 18:00 on weekdays."]))
    (folder / "hr" / "bonus.md").write_text(f"# Retention bonus 2027\nThe retention bonus pool for 2027 is {CANARY} "
                                            "kroner, paid out in March and September.\n", encoding="utf-8")
    (folder / "hr" / "bonus.md.meta.yaml").write_text("groups: [hr]\n", encoding="utf-8")


@pytest.fixture(scope="module")
def kb_settings(tmp_path_factory: pytest.TempPathFactory, real_embedder: Embedder) -> Iterator[Settings]:
    """One ingested data dir for the module (ingesting per test would cost seconds each)."""
    root = tmp_path_factory.mktemp("kb")
    _documents(root / "docs")
    with pytest.MonkeyPatch.context() as env:  # module scope runs before the per-test RAG_* isolation
        for key in [key for key in os.environ if key.startswith("RAG_")]:
            env.delenv(key)
        settings = Settings(data_dir=root / "data", _env_file=None)  # type: ignore[call-arg]
        service.sync([root / "docs"], settings, embedder=real_embedder)
        yield settings


@pytest.fixture(scope="module")
def operator(kb_settings: Settings, real_embedder: Embedder) -> KnowledgeBaseRetriever:
    return KnowledgeBaseRetriever(retriever=build_retriever(kb_settings, real_embedder), principal=LOCAL_OPERATOR)


def _has_canary(docs: list[Document]) -> bool:
    return any(CANARY in doc.page_content or doc.metadata["source"].startswith("hr/") for doc in docs)


def test_documents_carry_text_metadata_and_chunk_id(operator: KnowledgeBaseRetriever) -> None:
    docs = operator.invoke(UID_QUESTION)
    assert len(docs) == 3
    top = docs[0]
    assert "61184" in top.page_content
    assert top.metadata["source"] == "public/systemd-uids-gids.md"
    assert top.id == top.metadata["chunk_id"] and top.metadata["doc_id"]
    assert top.metadata["headings"] and "page" not in top.metadata  # Markdown has headings, no pages
    assert {"title", "dense_score", "keyword_score"} <= top.metadata.keys()
    scores = [doc.metadata["score"] for doc in docs]
    assert scores == sorted(scores, reverse=True) and all(isinstance(score, float) for score in scores)
    json.dumps([doc.metadata for doc in docs])  # JSON-friendly: vector stores and tracers serialise it
    hits = operator.retriever.search(UID_QUESTION, 3, LOCAL_OPERATOR)
    assert [doc.id for doc in docs] == [hit.chunk_id for hit in hits]  # the same hits as `rag search`


def test_pdf_documents_carry_their_page(operator: KnowledgeBaseRetriever) -> None:
    top = operator.invoke("When does the office open on weekdays?")[0]
    assert top.metadata["source"] == "public/office.pdf"
    assert top.metadata["page"] == 2 and "8:00" in top.page_content


def test_k_sets_how_many(operator: KnowledgeBaseRetriever) -> None:
    assert len(operator.model_copy(update={"k": 1}).invoke(UID_QUESTION)) == 1
    assert len(operator.model_copy(update={"k": 6}).invoke(UID_QUESTION)) == 6
    with pytest.raises(ValueError, match="k"):
        KnowledgeBaseRetriever(retriever=operator.retriever, k=0)


@pytest.mark.parametrize("principal", [ANONYMOUS, ENG], ids=["anonymous", "eng"])
def test_a_reader_outside_hr_never_gets_the_hr_document(operator: KnowledgeBaseRetriever,
                                                        principal: Principal) -> None:
    # k above the corpus size: every visible chunk comes back, so a leak could not hide below the cut.
    reader = operator.with_principal(principal).model_copy(update={"k": 100})
    questions = [BONUS_QUESTION, "How much money is set aside for keeping staff next year?", "bonus 7,340,000"]
    assert reader.invoke(BONUS_QUESTION)  # it finds the documents it may see
    assert not _has_canary(reader.invoke(BONUS_QUESTION))
    assert not _has_canary(asyncio.run(reader.ainvoke(BONUS_QUESTION)))
    assert not any(_has_canary(docs) for docs in reader.batch(questions))
    assert not any(_has_canary(docs) for docs in asyncio.run(reader.abatch(questions)))


def test_hr_and_the_operator_get_the_hr_document(operator: KnowledgeBaseRetriever) -> None:
    hr = operator.with_principal(HR)
    assert hr.principal is HR and operator.principal is LOCAL_OPERATOR  # a copy; the original keeps its principal
    assert CANARY in hr.invoke(BONUS_QUESTION)[0].page_content
    assert CANARY in asyncio.run(hr.ainvoke(BONUS_QUESTION))[0].page_content
    assert CANARY in operator.batch([BONUS_QUESTION])[0][0].page_content


def test_ainvoke_gives_the_same_documents_without_blocking_the_event_loop(operator: KnowledgeBaseRetriever) -> None:
    async def run() -> tuple[list[Document], int]:
        ticks, done = 0, False

        async def tick() -> None:
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        docs = await operator.ainvoke(UID_QUESTION)
        done = True
        await ticker
        return docs, ticks

    docs, ticks = asyncio.run(run())
    assert [doc.id for doc in docs] == [doc.id for doc in operator.invoke(UID_QUESTION)]
    # Searching on the loop leaves the ticker only the few awaits of the callback manager (measured: 3).
    assert ticks > 50, ticks


class Recorder(BaseCallbackHandler):
    """Records the retriever events LangChain's callback manager sends."""

    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def on_retriever_start(self, serialized: dict[str, Any], query: str, **kwargs: Any) -> None:
        self.events.append(("start", query))

    def on_retriever_end(self, documents: Any, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append(("end", len(documents)))

    def on_retriever_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        self.events.append(("error", type(error).__name__))


def test_callbacks_see_the_run(operator: KnowledgeBaseRetriever, tmp_path: Path, real_embedder: Embedder) -> None:
    recorder = Recorder()
    operator.invoke(UID_QUESTION, config={"callbacks": [recorder]})
    assert recorder.events == [("start", UID_QUESTION), ("end", 3)]
    empty = Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]
    with pytest.raises(EmptyIndex):
        KnowledgeBaseRetriever(retriever=build_retriever(empty, real_embedder)).invoke("x", {"callbacks": [recorder]})
    assert recorder.events[-1] == ("error", "EmptyIndex")


def test_an_empty_index_says_to_ingest(tmp_path: Path, real_embedder: Embedder) -> None:
    empty = Settings(data_dir=tmp_path / "data", _env_file=None)  # type: ignore[call-arg]
    retriever = KnowledgeBaseRetriever(retriever=build_retriever(empty, real_embedder))
    with pytest.raises(EmptyIndex, match="run `rag-ingest PATH` first"):
        retriever.invoke(UID_QUESTION)
    with pytest.raises(EmptyIndex, match="rag-ingest"):
        asyncio.run(retriever.ainvoke(UID_QUESTION))


def test_from_settings_reads_the_environment(kb_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_DATA_DIR", str(kb_settings.data_dir))
    monkeypatch.setenv("RAG_TOP_K", "50")  # above the corpus size: a leak could not hide below the cut
    anonymous = KnowledgeBaseRetriever.from_settings()
    assert anonymous.principal is ANONYMOUS and anonymous.k == 50  # safe by default, k from RAG_TOP_K
    visible = anonymous.invoke(BONUS_QUESTION)
    assert visible and not _has_canary(visible)
    hr = KnowledgeBaseRetriever.from_settings(groups="hr|finance", k=1)
    assert hr.principal.groups == {"hr", "finance"} and not hr.principal.all_groups
    assert CANARY in hr.invoke(BONUS_QUESTION)[0].page_content
    everyone = anonymous.with_principal(KnowledgeBaseRetriever.from_settings(kb_settings, groups=["*"]).principal)
    assert everyone.principal.all_groups and _has_canary(everyone.invoke(BONUS_QUESTION))


def test_from_settings_refuses_bad_input(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ConfigError, match="invalid group name"):
        KnowledgeBaseRetriever.from_settings(Settings(_env_file=None), groups=["hr", "no way"])  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="principal or groups"):
        KnowledgeBaseRetriever.from_settings(Settings(_env_file=None), principal=HR, groups="hr")  # type: ignore[call-arg]
    monkeypatch.setenv("RAG_TOP_K", "0")
    with pytest.raises(ConfigError, match="RAG_TOP_K"):
        KnowledgeBaseRetriever.from_settings()


def _readme_example() -> str:
    """docs/langchain.md's example chain, a fake chat model repeating its prompt in place of the LLM server."""
    readme = (REPO / "docs" / "langchain.md").read_text(encoding="utf-8")
    section = readme.split("## Use from LangChain", 1)[1].split("\n## ", 1)[0]
    code: list[str] = re.findall(r"```python\n(.*?)```", section, re.DOTALL)
    assert len(code) == 1, "the section has one example"
    server_lines = [line for line in code[0].splitlines() if "ChatOpenAI" in line]
    assert [line.split()[0] for line in server_lines] == ["from", "llm"], server_lines
    example = code[0].replace(server_lines[0] + "\n", "")
    return example.replace(server_lines[1], "from langchain_core.language_models.fake_chat_models import "
                                            "ParrotFakeChatModel\nllm = ParrotFakeChatModel()")


def test_the_readme_example_chain_runs(kb_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAG_DATA_DIR", str(kb_settings.data_dir))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(_readme_example(), "docs/langchain.md", "exec"), {"__name__": "readme_example"})
    prompt = out.getvalue()  # the fake model answers with the prompt it got: the excerpts the chain retrieved
    assert "Question: Which UID range does systemd use for dynamic users?" in prompt
    assert "[public/systemd-uids-gids.md, " in prompt and "61184" in prompt
    excerpts = re.findall(r"^\[([^,\n]+), ", prompt, re.MULTILINE)
    assert len(excerpts) == 3 and CANARY not in prompt, excerpts  # k=3, none outside group ops
