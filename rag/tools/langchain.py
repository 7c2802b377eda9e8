"""LangChain: the knowledge base as a langchain-core `BaseRetriever` (invoke, ainvoke, batch, LCEL chains).

It returns the same hits as `rag search`, for one principal, as `Document`s. The default principal is the anonymous
reader (documents without groups only), as for the HTTP API without keys, and unlike the CLI, whose default is the
local operator: the CLI runs on the operator's machine for the operator, while a library retriever usually ends up
answering other people (a chat app, an agent tool), where seeing every group must be asked for, not inherited.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, InstanceOf

from rag.config import Settings
from rag.core.access import ANONYMOUS, Principal, parse_grant
from rag.core.ports import Searcher
from rag.core.types import Hit
from rag.wiring import App

DEFAULT_K = int(Settings.model_fields["top_k"].default)


def reader(groups: str | Iterable[str]) -> Principal:
    """A reader holding these groups: a list, or the CLI's `hr|finance` form; `*` holds every group."""
    grant = groups if isinstance(groups, str) else "|".join(groups)
    names, everything, role = parse_grant(grant, "reader", "groups")
    return Principal(f"langchain reader ({grant or 'no groups'})", names, role, everything)


def to_document(hit: Hit) -> Document:
    """A hit as a LangChain document: the chunk's text, JSON-friendly metadata, and the chunk id as its id.

    `page` (1-based, as citations print it) is left out when the source has no pages, as LangChain's loaders
    do; `dense_score`, `keyword_score` and `rerank_score` are the parts of `score` (the fused one)."""
    metadata: dict[str, Any] = {"source": hit.source, "title": hit.title, "headings": hit.headings,
                                "score": hit.score, "chunk_id": hit.chunk_id, "doc_id": hit.doc_id}
    if hit.page is not None:
        metadata["page"] = hit.page
    metadata.update({f"{part}_score": value for part, value in hit.extra.items()})
    return Document(page_content=hit.text, metadata=metadata, id=hit.chunk_id)


class KnowledgeBaseRetriever(BaseRetriever):
    """The k best chunks the principal may see (hybrid dense + BM25 search, as `rag search`), as `Document`s.

    Errors of the knowledge base (an empty index, an unreachable Chroma server, bad settings) are raised as their
    `rag.core.errors.RagError` subclasses, with the message the CLI prints."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: InstanceOf[Searcher]
    principal: InstanceOf[Principal] = ANONYMOUS
    k: int = Field(default=DEFAULT_K, ge=1, le=100)

    @classmethod
    def from_settings(cls, settings: Settings | None = None, *, principal: Principal | None = None,
                      groups: str | Iterable[str] | None = None, k: int | None = None,
                      **kwargs: Any) -> KnowledgeBaseRetriever:
        """Built from RAG_* settings (the environment and .env when none are given) as `rag search` builds its
        retriever (with question translation by the served LLM); `groups` makes a reader of those groups, `k`
        defaults to RAG_TOP_K."""
        if principal is not None and groups is not None:
            raise ValueError("give principal or groups, not both")
        app = App(settings)  # RAG_* read once, when no settings are given
        who = principal or (reader(groups) if groups is not None else ANONYMOUS)
        return cls(retriever=app.retriever, principal=who, k=app.settings.top_k if k is None else k,
                   **kwargs)

    def with_principal(self, principal: Principal) -> KnowledgeBaseRetriever:
        """A copy answering for another principal, sharing the loaded models and index (one per request/user)."""
        return self.model_copy(update={"principal": principal})

    def _search(self, query: str) -> list[Document]:
        return [to_document(hit) for hit in self.retriever.search(query, self.k, self.principal)]

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return self._search(query)

    async def _aget_relevant_documents(self, query: str, *,
                                       run_manager: AsyncCallbackManagerForRetrieverRun) -> list[Document]:
        # The search embeds the question and reads Chroma and the keyword index, all blocking: off the event loop.
        return await asyncio.to_thread(self._search, query)
