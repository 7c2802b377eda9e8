"""Plain values passed between the parts: chunks going in, hits coming out."""

from __future__ import annotations

from dataclasses import dataclass, field

from rag.core.access import DocAccess


@dataclass(frozen=True, slots=True)
class Chunk:
    """A piece of one document, small enough for the embedder, with where it came from."""

    chunk_id: str
    text: str
    source: str
    doc_id: str
    content_hash: str
    position: int
    page: int | None = None
    headings: tuple[str, ...] = ()
    title: str = ""
    access: DocAccess = DocAccess()

    @property
    def heading_path(self) -> str:
        """The headings as stored and as ingest puts them on the text's first line: "Part > Section"."""
        return " > ".join(self.headings)

    def metadata(self) -> dict[str, str | int | bool]:
        """Flat metadata for the vector store (Chroma accepts scalars only)."""
        meta: dict[str, str | int | bool] = {
            "source": self.source,
            "doc_id": self.doc_id,
            "content_hash": self.content_hash,
            "position": self.position,
            "headings": self.heading_path,
            "title": self.title,
            **self.access.metadata(),
        }
        if self.page is not None:
            meta["page"] = self.page
        return meta


@dataclass(frozen=True, slots=True)
class Hit:
    """A retrieved chunk with its similarity score (cosine, higher is closer)."""

    chunk_id: str
    text: str
    source: str
    score: float
    page: int | None = None
    headings: str = ""
    title: str = ""
    doc_id: str = ""
    access: str = ""  # the stored access label (rag.core.access.DocAccess.label), checked again before any exit
    extra: dict[str, str | int | float] = field(default_factory=dict)
