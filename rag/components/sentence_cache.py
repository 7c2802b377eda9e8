"""The quote ranking's sentence vectors, remembered: a server quotes from the same popular chunks again and again.

The extractive ranking (rag.core.extract) embeds the best ten sentences of an answer's excerpts whenever it quotes
them, and whenever the model declines (to know whether a sure quote exists): with a real model's drafts that was
most of a worker's CPU per answer (benchmarks.app_cost --drafts) and ~100 ms of a quoted answer's wait on a CPU. A
sentence's vector depends on its text alone, so the last SENTENCES of them are kept in memory, keyed by text (1.5
KiB each for MiniLM: 6 MiB in all), and every one ever made in a file beside the index (SentenceVectorFile), which
the workers of one data dir share and ingest fills ahead of the questions (RAG_QUOTE_VECTORS_AT_INGEST).
"""

from __future__ import annotations

import hashlib
import logging
import sqlite3
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.components.recent import Recent
from rag.core.extract import Encoder, passage_sentences, text_body
from rag.core.ports import Embedder, Vectors, sentence_encoder
from rag.core.types import Chunk

log = logging.getLogger(__name__)

SENTENCES = 4096
# A model call pads every sentence to the longest one in it, and the quote ranking's ten sentences run from a few
# words to a paragraph: one call spent 2.2x the tokens it needed on benchmarks.app_cost's quoted answers. Calls of
# this many sentences of similar length: 56 -> 36 CPU ms per quoted answer (MiniLM, bf16, one thread; docs).
SIMILAR_LENGTHS = 4
LOOKUP_BATCH = 500  # keys per SELECT (SQLite's parameter limit is 32,766 on 3.32+, 999 before)
# How long a write waits for another process's (readers never wait in WAL mode): an answer's few new vectors are
# skipped rather than wait behind an ingest's batch; an ingest's batch waits for the answers' few rows.
ANSWER_WAIT_S, INGEST_WAIT_S = 0.1, 30.0


class SentenceVectorFile:
    """Sentence vectors on disk, keyed by (vector space, text): a content-addressed cache, so a deleted document's
    rows are harmless and a re-embed with another model reads none of the old ones. Safe from many threads and
    processes (SQLite in WAL mode); a failed read is a miss and a failed write is skipped, never an error to the
    asker."""

    def __init__(self, path: Path, space: str, wait_s: float = ANSWER_WAIT_S) -> None:
        self._path, self._space, self._wait_s = path, space, wait_s
        self._local = threading.local()
        self.usable = True
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with self._db() as db:
                db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB NOT NULL) "
                           "WITHOUT ROWID")
        except (sqlite3.Error, OSError) as exc:  # a cache: answers go on without it
            self.usable = False
            log.warning("sentence vectors cannot be kept at %s (%s): they are made per answer until the file is "
                        "removed (it holds nothing else)", path, exc)

    def _db(self) -> sqlite3.Connection:
        db: sqlite3.Connection | None = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self._path, timeout=self._wait_s)
            db.execute("PRAGMA journal_mode=WAL")  # readers never wait for a writer
            db.execute("PRAGMA synchronous=NORMAL")  # a cache: a row lost in a power cut is made again
            self._local.db = db
        return db

    def key(self, text: str) -> bytes:
        """The row key of a text's vector in this space."""
        return hashlib.blake2b(f"{self._space}\0{text}".encode(), digest_size=16).digest()

    def get(self, texts: Iterable[str]) -> dict[str, Vectors]:
        """The vectors kept for these texts (the others are absent)."""
        found: dict[str, Vectors] = {}
        if not self.usable:
            return found
        by_key = {self.key(text): text for text in texts}
        keys = list(by_key)
        try:
            for start in range(0, len(keys), LOOKUP_BATCH):
                part = keys[start:start + LOOKUP_BATCH]
                rows = self._db().execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(part))})",
                                          part)
                found |= {by_key[key]: np.frombuffer(blob, dtype=np.float32) for key, blob in rows}
        except sqlite3.Error as exc:
            log.warning("sentence vectors at %s unreadable (%s): made again", self._path, exc)
        return found

    def put(self, vectors: Mapping[str, Vectors]) -> None:
        """Keep these vectors (rows already there stay as they are)."""
        if not self.usable:
            return
        rows = [(self.key(text), np.asarray(vector, dtype=np.float32).tobytes()) for text, vector in vectors.items()]
        try:
            with self._db() as db:
                db.executemany("INSERT OR IGNORE INTO vectors (key, vector) VALUES (?, ?)", rows)
        except sqlite3.Error as exc:
            log.warning("sentence vectors not kept at %s (%s)", self._path, exc)


class RememberedSentences:
    """An Encoder whose `embed_documents` runs the model only on sentences it has not seen lately, nor kept in
    `kept`; safe from many threads (two threads may embed the same new sentence once each: the model is the slow
    part, not the memory)."""

    def __init__(self, encoder: Encoder, size: int = SENTENCES, kept: SentenceVectorFile | None = None) -> None:
        self._encoder = encoder
        self._vectors: Recent[str, Vectors] = Recent(size)
        self._kept = kept

    def embed_query(self, text: str) -> Vectors:
        """The encoder's question vector (its own embedder remembers recent questions)."""
        return self._encoder.embed_query(text)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """One normalized row per text, from memory or the file where the text was embedded before."""
        if not texts:
            return self._encoder.embed_documents(texts)
        known = {text: vector for text in texts if (vector := self._vectors.get(text)) is not None}
        missing = list(dict.fromkeys(text for text in texts if text not in known))
        if missing and self._kept is not None:
            read = self._kept.get(missing)
            self._remember(read)
            known |= read
            missing = [text for text in missing if text not in read]
        if missing:
            fresh = {text: vector for group in _by_length(missing, SIMILAR_LENGTHS)
                     for text, vector in zip(group, self._encoder.embed_documents(group), strict=True)}
            self._remember(fresh)
            if self._kept is not None:
                self._kept.put(fresh)
            known |= fresh
        return np.stack([known[text] for text in texts]).astype(np.float32, copy=False)

    def _remember(self, vectors: Mapping[str, Vectors]) -> None:
        for text, vector in vectors.items():
            self._vectors.put(text, vector)


@dataclass(frozen=True, slots=True)
class QuoteVectors:
    """Where the quote ranking's sentence vectors are kept (a file beside the index) and what besides the model
    decides their space (RAG_EMBED_BACKEND, RAG_EMBED_DTYPE as configured: the device changes a vector by rounding
    only, so vectors made on a GPU at ingest serve workers on CPUs)."""

    path: Path
    backend: str
    dtype: str

    def file(self, encoder: Embedder, wait_s: float = ANSWER_WAIT_S) -> SentenceVectorFile:
        """The file, read and written in this encoder's space."""
        return SentenceVectorFile(self.path, f"{encoder.name}|{self.backend}|{self.dtype}", wait_s)

    def keep(self, chunks: Sequence[Chunk], embedder: Embedder) -> int:
        """Ingest's part: the quotable sentences of these chunks that the file lacks, embedded by the embedder's
        quote model (a pair's first) and kept; returns how many were embedded."""
        encoder = sentence_encoder(embedder)
        return keep_chunk_sentences(chunks, encoder, self.file(encoder, INGEST_WAIT_S))


def keep_chunk_sentences(chunks: Sequence[Chunk], encoder: Encoder, kept: SentenceVectorFile) -> int:
    """Embed the quotable sentences of these chunks that the file lacks, in one call (the embedder batches and
    sorts them), and keep them; returns how many were embedded."""
    texts = dict.fromkeys(sentence.text for chunk in chunks
                          for sentence in passage_sentences(text_body(chunk.text, chunk.heading_path)))
    found = kept.get(texts)
    missing = [text for text in texts if text not in found]
    if missing:
        kept.put(dict(zip(missing, encoder.embed_documents(missing), strict=True)))
    return len(missing)


def _by_length(texts: Sequence[str], size: int) -> list[list[str]]:
    """The texts shortest first, in groups of `size` (characters stand in for tokens)."""
    ordered = sorted(texts, key=len)
    return [ordered[start:start + size] for start in range(0, len(ordered), size)]
