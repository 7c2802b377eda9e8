"""Chunking measured in the embedder's own tokens, so nothing is ever truncated at embedding time."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from langchain_text_splitters import RecursiveCharacterTextSplitter

from ingest.loaders import LoadedDoc

TokenCounter = Callable[[str], int]

# Paragraphs, lines, then sentence ends (Chinese full-width and Western), clauses, words, characters.
SEPARATORS = ["\n\n", "\n", "。", "！", "？", "；", ". ", "! ", "? ", "; ", "，", "、", ", ", " ", ""]


@dataclass(frozen=True, slots=True)
class Piece:
    """One chunk's text and where in the document it sits."""

    text: str
    page: int | None
    headings: tuple[str, ...]


def _splitter(count: TokenCounter, size: int, overlap: int) -> RecursiveCharacterTextSplitter:
    return RecursiveCharacterTextSplitter(
        separators=SEPARATORS,
        chunk_size=size,
        chunk_overlap=min(overlap, size // 2),
        length_function=count,
        keep_separator="end",
        strip_whitespace=True,
    )


def chunk_document(doc: LoadedDoc, count: TokenCounter, size: int, overlap: int, limit: int) -> list[Piece]:
    """Split every section into pieces of at most `size` tokens (heading line included), never over `limit`."""
    pieces: list[Piece] = []
    for section in doc.sections:
        header = " > ".join(section.headings)
        budget = max(16, size - (count(header) + 1 if header else 0))
        for body in _split(section.text, count, budget, overlap):
            text = f"{header}\n{body}" if header else body
            pieces.extend(Piece(part, section.page, section.headings) for part in _enforce(text, count, limit))
    return pieces


def _split(text: str, count: TokenCounter, size: int, overlap: int) -> list[str]:
    return [part for part in _splitter(count, size, overlap).split_text(text) if part.strip()]


def _enforce(text: str, count: TokenCounter, limit: int) -> Iterator[str]:
    # Token counts of merged pieces are not exactly additive; re-split the rare chunk that ends up over.
    if count(text) <= limit:
        yield text
        return
    for part in _split(text, count, max(8, limit * 3 // 4), 0):
        yield from _enforce(part, count, limit)
