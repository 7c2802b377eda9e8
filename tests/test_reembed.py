"""`rag-ingest --reembed`: a model change builds a new collection beside the old one and switches only when complete."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from ingest import service
from ingest.reembed import reembed
from rag.components.collections import CollectionRegistry
from rag.components.models import resolve_embed_model
from rag.components.paired_embedder import PAIR_SEPARATOR, pair_parts
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.errors import ConfigError
from rag.core.ports import Embedder, Vectors
from rag.wiring import App, build_chroma_client, build_retriever, build_store, collection_name
from tests.conftest import CountingEmbedder, run_in_process

DOCS = {"printer.md": "# Printer\nTo replace the toner, open the front door and pull the cartridge out.",
        "vpn.md": "# VPN\nThe VPN client needs the company certificate installed before the first connection."}


class FailingEmbedder(CountingEmbedder):
    """Fails on its second batch, as a killed or crashed re-embed would stop half-way."""

    def embed_documents(self, texts: list[str]) -> Vectors:  # type: ignore[override]
        if self.embedded:
            raise RuntimeError("embedder crashed")
        return super().embed_documents(texts)


@pytest.fixture
def ingested(settings: Settings, docs: Path, write: Callable[[str, str], Path], real_embedder: Embedder) -> Settings:
    """Settings of a collection holding DOCS, and settings naming another model (the same weights by their path)."""
    for name, text in DOCS.items():
        write(name, text)
    service.sync([docs], settings, embedder=real_embedder)
    other = PAIR_SEPARATOR.join(resolve_embed_model(part) for part in pair_parts(settings.embed_model))
    return settings.model_copy(update={"embed_model": other})


def sources(settings: Settings) -> list[str]:
    return [entry.source for entry in service.library(App(settings)).documents()]


def test_a_new_model_is_refused_until_reembedded(ingested: Settings, settings: Settings) -> None:
    with pytest.raises(ConfigError, match=r"rag-ingest --reembed"):
        build_store(ingested)
    assert build_store(settings).count() > 0  # the refusal changed nothing


def test_reembed_copies_every_chunk_and_switches_when_complete(ingested: Settings, settings: Settings,
                                                               real_embedder: Embedder) -> None:
    counting = CountingEmbedder(real_embedder)
    chunks = build_store(settings).count()
    done = reembed(App(ingested, embedder=counting))
    assert (done.chunks, done.documents, counting.embedded) == (chunks, 2, chunks)
    assert (done.source, done.kept) == (settings.collection, settings.collection)
    assert done.source_model == settings.embed_model
    assert collection_name(ingested) == done.generation != collection_name(settings) == settings.collection
    new, old = build_store(ingested), build_store(settings)
    assert new.all_ids() == old.all_ids() and new.keyword is not None and new.keyword.ids() == old.all_ids()
    assert sources(ingested) == sources(settings) == ["printer.md", "vpn.md"]
    hits = build_retriever(ingested, real_embedder).search("How do I change the toner?", 1, LOCAL_OPERATOR)
    assert hits[0].source == "printer.md"


def test_a_failed_reembed_leaves_the_old_collection(ingested: Settings, settings: Settings, real_embedder: Embedder,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ingest.reembed.PAGE", 1)
    with pytest.raises(RuntimeError, match="embedder crashed"):
        reembed(App(ingested, embedder=FailingEmbedder(real_embedder)))
    assert collection_name(ingested) == settings.collection
    assert _generations(settings) == []  # the half-built one was dropped
    with pytest.raises(ConfigError, match=r"--reembed"):
        build_store(ingested)


def test_a_killed_reembeds_leftover_is_dropped_by_the_next(ingested: Settings, settings: Settings,
                                                          real_embedder: Embedder) -> None:
    leftover = CollectionRegistry(settings.index_dir).new_name(settings.collection, ingested.embed_model)
    build_chroma_client(settings).get_or_create_collection(leftover)  # as a SIGKILLed run leaves it
    done = reembed(App(ingested, embedder=real_embedder))
    assert _generations(settings) == [done.generation]


def test_same_model_reembeds_retire_then_drop_the_replaced_generation(ingested: Settings, settings: Settings,
                                                                      real_embedder: Embedder) -> None:
    first = reembed(App(ingested, embedder=real_embedder))
    second = reembed(App(ingested, embedder=real_embedder))
    assert (second.source, second.kept, second.dropped) == (first.generation, first.generation, ())
    third = reembed(App(ingested, embedder=real_embedder))
    assert third.dropped == (first.generation,)
    assert _generations(settings) == sorted([second.generation, third.generation])
    assert build_store(settings).count() > 0  # the old model's collection is never dropped by a model change
    assert sources(settings) == sources(ingested)


def test_nothing_to_reembed_is_a_clear_error(settings: Settings) -> None:
    with pytest.raises(ConfigError, match="nothing to re-embed"):
        reembed(App(settings.model_copy(update={"embed_model": "other"})))


def _generations(settings: Settings) -> list[str]:
    names: Sequence[str] = [c.name for c in build_chroma_client(settings).list_collections()]
    return sorted(name for name in names if name.startswith(f"{settings.collection}--"))


def test_rag_ingest_reembed_then_syncs_the_given_folder(ingested: Settings, docs: Path, cli_env: dict[str, str],
                                                        write: Callable[[str, str], Path]) -> None:
    write("badge.md", "# Badges\nLost badges are replaced at the front desk on the ground floor.")
    env = cli_env | {"RAG_EMBED_MODEL": ingested.embed_model}
    done = run_in_process("rag-ingest", ["--reembed", str(docs), "--json"], env)
    assert done.returncode == 0, done.stderr
    assert "Re-embedded" in done.stderr and json.loads(done.stdout.splitlines()[-1])["added"] == 1
    assert sources(ingested) == ["badge.md", "printer.md", "vpn.md"]
    refused = run_in_process("rag-ingest", [str(docs)], cli_env | {"RAG_EMBED_MODEL": "other/model"})
    assert refused.returncode == 2 and "--reembed" in refused.stderr


def test_a_running_server_follows_a_same_model_reembed_so_relabels_reach_it(
        settings: Settings, docs: Path, write: Callable[[str, str], Path], real_embedder: Embedder) -> None:
    """The server opened the old generation at start; after the re-embed a sync relabels the new one, and the
    server's next request searches that one: the document restricted since is not served as open."""
    from fastapi.testclient import TestClient

    from tests.fake_llm import FakeLLMServer
    from ui.api.app import create_app
    from ui.serving.services import build_services

    for name, text in DOCS.items():
        write(name, text)
    service.sync([docs], settings, embedder=real_embedder)
    llm = FakeLLMServer(lambda _: "Install the company certificate before the first connection [1].").llm()
    services = build_services(App(settings, embedder=real_embedder, llm=llm))
    question = {"question": "What does the VPN client need before the first connection?"}
    with TestClient(create_app(settings, services)) as client:
        assert "vpn.md" in client.post("/v1/ask", json=question).text
        started_on = services.store.name
        done = reembed(App(settings, embedder=real_embedder))
        write("vpn.md.meta.yaml", "groups: [it]\n")
        service.sync([docs], settings, embedder=real_embedder)
        answer = client.post("/v1/ask", json=question)
        assert answer.status_code == 200 and "vpn.md" not in answer.text, answer.text
        assert (started_on, services.store.name) == (done.source, done.generation)
        assert "vpn.md" not in [doc["source"] for doc in client.get("/v1/documents").json()]


def test_the_registry_is_read_again_once_another_process_swaps_it(tmp_path: Path) -> None:
    registry = CollectionRegistry(tmp_path)
    assert registry.resolve("docs", "model-b") == "docs"
    registry.register("docs", "model-b", "docs--b--1", "docs", "model-a")
    assert registry.resolve("docs", "model-b") == "docs--b--1"
    # Another process's write: a new file swapped in, of the same size (the inode tells it apart).
    swapped = tmp_path / "swapped.json"
    swapped.write_text(registry.path.read_text().replace("docs--b--1", "docs--b--2"))
    os.replace(swapped, registry.path)
    assert CollectionRegistry(tmp_path).resolve("docs", "model-b") == "docs--b--2"
    registry.path.unlink()
    assert registry.resolve("docs", "model-b") == "docs"
