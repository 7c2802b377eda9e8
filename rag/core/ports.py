"""What the core consumes, as Protocols and plain value types: embedders, the dense and keyword indexes, and the
chat model. Adapters in rag.components implement them; tests use fakes of the same shapes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from rag.core.access import DocAccess, Principal, Visible
    from rag.core.prompt import Message
    from rag.core.types import Chunk, Hit

Admits = Callable[[str], bool]  # whether the caller may see chunks with this access label


Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    """Turns text into normalized vectors: rag.components.embedder's torch one, or rag.components.onnx_embedder's."""

    name: str
    batch_size: int

    @property
    def max_tokens(self) -> int: ...
    @property
    def dimension(self) -> int: ...
    def embed_documents(self, texts: Sequence[str]) -> Vectors: ...
    def embed_query(self, text: str) -> Vectors: ...


@runtime_checkable
class CalibratedEmbedder(Protocol):
    """An embedder whose raw cosines need the question and chunk to be read on one scale
    (rag.components.paired_embedder)."""

    def calibrated(self, question: str, text: str, cosine: float) -> float: ...


@runtime_checkable
class CompositeEmbedder(Protocol):
    """An embedder made of models, whose `first` one alone ranks an answer's sentences
    (rag.components.paired_embedder)."""

    @property
    def first(self) -> Embedder: ...


def sentence_encoder(embedder: Embedder) -> Embedder:
    """The model that ranks sentences for quotes: a pair's first (the extractive ranking's weights were fitted on
    MiniLM's cosines, which a pair's mixed scale would shift), else the embedder itself."""
    return embedder.first if isinstance(embedder, CompositeEmbedder) else embedder


@dataclass(frozen=True, slots=True)
class KeywordHit:
    """A chunk found by keyword; `coverage` is its BM25 score over the most the query could score (0–1)."""

    chunk_id: str
    score: float
    coverage: float


@dataclass(frozen=True, slots=True)
class Nearest:
    """A look-ahead of the dense side: the chunks picked by the copy of the labels (nearest first), and the cosine
    distance of every chunk it looked at."""

    picked: list[str]
    distances: dict[str, float]


class DenseIndex(Protocol):
    """Search by meaning, restricted to what the asker may see (`visible`; None: no restriction), which each index
    turns into its own filter."""

    name: str

    def search(self, query: Vectors, k: int, visible: Visible | None = None, overfetch: int = 0,
               likely: Callable[[str], bool] | None = None) -> list[Hit]:
        """The k closest visible chunks, best first (`likely`: the rule on a copy of the labels by chunk id; with
        it the index may look at the `overfetch` nearest unfiltered first)."""
        ...

    def fetch(self, ids: Sequence[str], query: Vectors, admits: Admits | None = None) -> list[Hit]:
        """Chunks by id that `admits` lets through, scored against the query."""
        ...

    def nearest(self, query: Vectors, k: int, overfetch: int, likely: Callable[[str], bool]) -> Nearest:
        """The `overfetch` nearest chunks unfiltered, without their rows: the first k that `likely` lets through
        and every one's cosine distance."""
        ...

    def read(self, nearest: Nearest, named: Sequence[str], query: Vectors, visible: Visible,
             admits: Admits | None) -> tuple[list[Hit], list[Hit]]:
        """The picked chunks of `nearest` that `visible` admits by their stored labels, best first, and the `named`
        ones that `admits` lets through scored against the query: in one read where the index can."""
        ...

    def count(self) -> int:
        """Number of chunks stored."""
        ...


class KeywordSearch(Protocol):
    """Search by words; `admits` says which access labels the caller may see (None: all)."""

    def search(self, query: str, k: int, include: Sequence[str] = (), admits: Admits | None = None) -> list[KeywordHit]:
        """The k best visible chunks by BM25, then those named in `include`."""
        ...

    def warm(self) -> None:
        """Load what the first search would otherwise wait for."""
        ...

    def visibility(self, admits: Admits) -> tuple[float, Callable[[str], bool]]:
        """The share of chunks `admits` lets through, and that rule by chunk id from the index's copy of labels."""
        ...

    def languages(self) -> dict[str, tuple[int, int]]:
        """Per access label: (chunks, chunks holding Chinese)."""
        ...


class KeywordStore(KeywordSearch, Protocol):
    """A keyword index that ingest writes to, kept in step with the dense store."""

    def add(self, chunks: Sequence[Chunk]) -> None:
        """Index (or re-index) chunks."""
        ...

    def set_access(self, chunk_ids: Sequence[str], access: DocAccess) -> None:
        """Relabel chunks without tokenizing them again."""
        ...

    def delete(self, chunk_ids: Sequence[str]) -> None:
        """Forget chunks (unknown ids are ignored)."""
        ...

    def ids(self) -> set[str]:
        """Every indexed chunk id."""
        ...

    def unlabelled(self) -> list[str]:
        """Chunks indexed without an access label (to be labelled from the dense store)."""
        ...


@runtime_checkable
class Searcher(Protocol):
    """What the query path searches with (rag.core.retrieve.Retriever, or a list in tests)."""

    def search(self, question: str, k: int, principal: Principal) -> list[Hit]:
        """The k best chunks the principal may see, best first."""
        ...

    def warm(self) -> None:
        """Load what the first search would otherwise wait for."""
        ...


class SearchIndex(Protocol):
    """What a retriever searches: the dense side and, where there is one, the keyword side."""

    @property
    def dense(self) -> DenseIndex: ...
    @property
    def keyword(self) -> KeywordSearch | None: ...


class Stopped(Exception):
    """The caller stopped a stream (its client went away): not a failure of the LLM."""


class Stop(threading.Event):
    """Stops streams from another thread: a stream ends with Stopped at its next chunk, and a read still waiting on
    the server (a queued request, a long prefill) is cut short by shutting its connection down. Either way the
    server sees the client go, and vLLM aborts the request. Readers ask the Event's `is_set`."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._hooks: dict[int, Callable[[], None]] = {}

    def set(self) -> None:
        """Stop now; safe from any thread."""
        with self._lock:  # hooks run under the lock: a stream past its `hook` block has let its connection go
            super().set()
            for action in self._hooks.values():
                with suppress(OSError):
                    action()
            self._hooks.clear()

    @contextmanager
    def hook(self, action: Callable[[], None]) -> Iterator[None]:
        """Run `action` when stopped while the block runs (at once if stopped already)."""
        with self._lock:
            if self.is_set():
                with suppress(OSError):
                    action()
            self._hooks[id(action)] = action
        try:
            yield
        finally:
            with self._lock:
                self._hooks.pop(id(action), None)


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the server."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Delta:
    """A piece of streamed text, or (at the end) the usage of the whole call."""

    text: str = ""
    usage: Usage | None = None


class ChatModel(Protocol):
    """A served chat model: the answer is streamed, a short rewrite or translation completed at once."""

    model: str

    @property
    def base_url(self) -> str: ...
    def stream(self, messages: Sequence[Message], max_tokens: int | None = None,
               stop: Stop | None = None) -> Generator[Delta, None, None]: ...
    def complete(self, messages: Sequence[Message], max_tokens: int | None = None) -> str: ...
