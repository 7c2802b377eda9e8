"""`rag-ingest --reembed`: rebuild a collection with another embedding model beside the old one, switch when complete.

The stored chunks are copied (text, document, page, headings, access labels) and only their vectors are computed
again, so nothing is parsed and the result does not depend on the folders still being where they were. The keyword
index and the manifest are model-independent and copied as they are. Until the new generation is registered
(rag.components.collections), every process keeps using the old one; one left by a killed run is dropped by the next.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ingest.manifest import Manifest
from ingest.service import Library, library
from rag.components.collections import CollectionRegistry
from rag.components.store import ChromaStore
from rag.config import Settings
from rag.core.errors import ConfigError
from rag.wiring import App, build_chroma_client, copy_shared_keyword_index, drop_keyword_index, keyword_path

if TYPE_CHECKING:
    from chromadb.api import ClientAPI

PAGE = 256  # chunks read, embedded and written per step


@dataclass(frozen=True, slots=True)
class Reembedded:
    """What a re-embed built and what it left in place."""

    source: str  # the generation copied
    source_model: str
    generation: str  # the new Chroma collection, now registered for RAG_EMBED_MODEL
    chunks: int
    documents: int
    kept: str  # the collection the model used before, kept for processes still running with it
    dropped: tuple[str, ...]  # older generations deleted now


def reembed(app: App, on_chunks: Callable[[int, int], None] = lambda done, total: None) -> Reembedded:
    """Copy RAG_COLLECTION's current generation into a new one embedded with the app's embedder (RAG_EMBED_MODEL)
    and register it."""
    settings, documents = app.settings, library(app)
    registry = CollectionRegistry(settings.index_dir)
    client = build_chroma_client(settings)
    with documents.lock("rag-ingest --reembed"):
        _drop_leftovers(settings, documents, registry, client)
        source = registry.current(settings.collection)
        source_model = ChromaStore.stored_model(client, source)
        if source_model is None:
            raise ConfigError(f"nothing to re-embed: collection {source!r} does not exist yet; run rag-ingest PATHS")
        generation = registry.new_name(settings.collection, settings.embed_model)
        try:
            chunks, copied = _build(app, documents, client, (source, source_model), generation, on_chunks)
        except BaseException:
            _drop(settings, documents, client, generation)  # an unfinished generation never becomes visible
            raise
        replaced = registry.register(settings.collection, settings.embed_model, generation, source, source_model)
        for name in replaced.dropped:
            _drop(settings, documents, client, name)
    return Reembedded(source, source_model, generation, chunks, copied, replaced.kept, replaced.dropped)


def _build(app: App, documents: Library, client: ClientAPI, source_and_model: tuple[str, str], generation: str,
           on_chunks: Callable[[int, int], None]) -> tuple[int, int]:
    source = source_and_model[0]
    old = ChromaStore(client, *source_and_model)
    new = ChromaStore(client, generation, app.settings.embed_model)
    embedder = app.embedder
    ids = sorted(old.all_ids())
    for start in range(0, len(ids), PAGE):
        page_ids, texts, metas = old.rows(ids[start : start + PAGE])
        new.put_rows(page_ids, embedder.embed_documents(texts), texts, metas)
        on_chunks(min(start + PAGE, len(ids)), len(ids))
    if new.count() != len(ids):
        raise ConfigError(f"re-embed incomplete: {new.count()} of {len(ids)} chunks stored; the old collection stays")
    _copy_keyword(app.settings, source, generation)
    with documents.manifest(source) as before, documents.manifest(generation) as after:
        return len(ids), _copy_manifest(before, after)


def _copy_keyword(settings: Settings, source: str, generation: str) -> None:
    if settings.keyword_db_url:  # shared by replicas in PostgreSQL: copied there
        copy_shared_keyword_index(settings, source, generation)
        return
    origin, target = keyword_path(settings, source), keyword_path(settings, generation)
    if not origin.exists():
        return  # rebuilt from the new collection by the next sync (Index.sync_keyword)
    target.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(origin) as src, sqlite3.connect(target) as dst:
        src.backup(dst)  # a consistent copy even while a server reads the origin (WAL)


def _copy_manifest(before: Manifest, after: Manifest) -> int:
    entries = list(before)
    for entry in entries:
        after.put(entry)
    return len(entries)


def _drop(settings: Settings, documents: Library, client: ClientAPI, name: str) -> None:
    ChromaStore.drop(client, name)
    drop_keyword_index(settings, name)
    with documents.manifest(name) as manifest:
        manifest.clear()


def _drop_leftovers(settings: Settings, documents: Library, registry: CollectionRegistry, client: ClientAPI) -> None:
    """Generations a killed re-embed created but never registered."""
    known = registry.generations(settings.collection)
    prefix = f"{settings.collection}--"
    for collection in client.list_collections():
        if collection.name.startswith(prefix) and collection.name not in known:
            _drop(settings, documents, client, collection.name)
