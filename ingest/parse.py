"""Parsing one file, meant to run in a worker process: bytes → loaded document → token-bounded pieces."""

from __future__ import annotations

import functools
import hashlib
import os
import resource
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from ingest.chunker import Piece, TokenCounter, chunk_document
from ingest.html import load_html
from ingest.loaders import LOADERS, LoadedDoc, LoadError, decode_text, front_matter, load_markdown
from ingest.safe_read import read_inside
from rag.core.access import DocAccess, document_access

if TYPE_CHECKING:
    from ingest.scan import FoundFile

SUPPORTED: dict[str, Callable[[bytes, str], LoadedDoc]] = {**LOADERS, ".html": load_html, ".htm": load_html}
SIDECAR_SUFFIX = ".meta.yaml"
WORKER_MEMORY_BYTES = 6 * 1024**3


@dataclass(frozen=True, slots=True)
class ChunkSpec:
    """How to chunk: the tokenizer's model path and the token sizes."""

    tokenizer_path: str
    size: int
    overlap: int
    limit: int


@dataclass(frozen=True, slots=True)
class ParsedDoc:
    """A parsed and chunked file, ready to embed."""

    title: str
    access: DocAccess
    pieces: list[Piece]


def is_supported(path: Path) -> bool:
    """Whether a loader exists for this file's extension."""
    return path.suffix.lower() in SUPPORTED and not path.name.endswith(SIDECAR_SUFFIX)


def has_front_matter(path: Path) -> bool:
    """Whether documents of this type may declare their groups in YAML front matter (Markdown)."""
    return SUPPORTED.get(path.suffix.lower()) is load_markdown


def sidecar_of(path: Path) -> Path:
    """The optional metadata file beside a document: NAME.EXT.meta.yaml with `groups: [...]`."""
    return path.with_name(path.name + SIDECAR_SUFFIX)


def init_worker() -> None:
    """Cap a parse worker's memory (a decompression bomb fails there, not on the machine) and lower its priority."""
    resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY_BYTES, WORKER_MEMORY_BYTES))
    # Parsing runs ahead of the embedder; at low priority it fills the embedder's idle gaps instead of taking
    # cycles from its matrix multiplications.
    os.nice(10)


@functools.lru_cache(maxsize=2)
def token_counter(tokenizer_path: str) -> TokenCounter:
    """A function counting tokens in the embedder's tokenizer (loaded once per worker process)."""
    fast_file = Path(tokenizer_path) / "tokenizer.json"
    if fast_file.is_file():
        # The tokenizers library alone loads in milliseconds; transformers would take seconds per worker.
        from tokenizers import Tokenizer

        fast = Tokenizer.from_file(str(fast_file))
        fast.no_truncation()
        fast.no_padding()

        # The splitter measures each piece twice (split, then merge): the cache halves tokenizer calls.
        @functools.lru_cache(maxsize=8192)
        def count(text: str) -> int:
            return len(fast.encode(text, add_special_tokens=False).ids)

        return count
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    tokenizer.model_max_length = 10**9  # we only count here; the limit is enforced by the chunker
    return lambda text: len(tokenizer.encode(text, add_special_tokens=False))


def parse_file(found: FoundFile, digest: str, sidecar: bytes | None, spec: ChunkSpec) -> ParsedDoc:
    """Load and chunk the file the scan found, if its bytes still have the planned hash (`digest`); raises
    LoadError with a one-line reason when it cannot be read."""
    try:
        data = read_inside(found.root, found.path, found.identity)
    except OSError as exc:
        raise LoadError(f"cannot read: {exc.strerror}") from exc
    if hashlib.sha256(data).hexdigest() != digest:
        # The chunks would carry the planned hash while holding other bytes; the next sync plans them anew.
        raise LoadError("changed while this sync was reading it; it is read again on the next sync")
    return parse_bytes(data, found.path.name, sidecar, spec)


def parse_bytes(data: bytes, name: str, sidecar: bytes | None, spec: ChunkSpec) -> ParsedDoc:
    """Load and chunk a file's bytes; raises LoadError with a one-line reason when they cannot be read."""
    if not data.strip():
        raise LoadError("empty file")
    loader = SUPPORTED[Path(name).suffix.lower()]
    doc = loader(data, name)
    access = sidecar_access(sidecar) or doc.access
    count = token_counter(spec.tokenizer_path)
    pieces = chunk_document(doc, count, spec.size, spec.overlap, spec.limit)
    if not pieces:
        raise LoadError("no text found in the document")
    return ParsedDoc(title=doc.title, access=access, pieces=pieces)


def sidecar_access(data: bytes | None) -> DocAccess | None:
    """The access a sidecar sets: None without a sidecar or without groups in it; locked when it cannot be
    read (a broken sidecar must not open a document that it was meant to restrict)."""
    if data is None:
        return None
    try:
        meta = yaml.safe_load(data.decode("utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError):
        return DocAccess(locked=True)
    if not isinstance(meta, dict):
        return DocAccess(locked=True) if meta is not None else None
    groups = meta.get("groups")
    return document_access(groups) if groups not in (None, [], "") else None


def read_access(found: FoundFile, sidecar: bytes | None) -> DocAccess:
    """A document's access without parsing its body: the sidecar's groups, else Markdown front matter's."""
    from_sidecar = sidecar_access(sidecar)
    if from_sidecar is not None:
        return from_sidecar
    if not has_front_matter(found.path):
        return DocAccess()
    try:
        meta, _ = front_matter(decode_text(read_inside(found.root, found.path, found.identity)))
    except (LoadError, OSError):
        return DocAccess(locked=True)
    return document_access(meta.get("groups"))
