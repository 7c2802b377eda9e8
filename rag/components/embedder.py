"""Sentence-BERT embeddings: normalized vectors for documents and queries, and the model's token budget."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from rag.components.coalesce import RECENT_QUERIES, Coalescer
from rag.core.ports import Vectors

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

    from rag.components.traced import TracedQueries


class TorchEmbedder:
    """Wraps one SentenceTransformer (on a GPU, or on CPUs with RAG_EMBED_BACKEND=torch)."""

    def __init__(self, model: SentenceTransformer, name: str, batch_size: int = 64) -> None:
        self._model = _placed_once(model)
        self.name = name
        self.batch_size = batch_size
        self._traced: TracedQueries | None = None  # traced at the first question (never in an ingest)
        self._trace_tried = False
        self._queries: Coalescer[str, Vectors] = Coalescer(self._embed_queries, most=batch_size,
                                                           remember=RECENT_QUERIES)

    @property
    def max_tokens(self) -> int:
        """Tokens of text one input may hold: the model's max_seq_length minus its special tokens and the prompt
        put before every passage (e5's "passage: ")."""
        prompt = self._passage_prompt()
        overhead = len(self._model.tokenizer(prompt, add_special_tokens=True)["input_ids"])
        return int(self._model.max_seq_length or 512) - overhead

    def _passage_prompt(self) -> str:
        # The names encode_document tries, in its order.
        prompts = self._model.prompts or {}
        return next((prompts[name] or "" for name in ("document", "passage", "corpus") if name in prompts), "")

    @property
    def dimension(self) -> int:
        """Length of one embedding vector."""
        # sentence-transformers 6 renamed it (the old name warns on every `rag ask`); older releases have the old one.
        measure = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        dim = measure()
        assert dim is not None
        return int(dim)

    def embed_documents(self, texts: Sequence[str]) -> Vectors:
        """Embed many passages in batches, with the model's passage prompt if it has one; rows are L2-normalized."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode_document(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_query(self, text: str) -> Vectors:
        """Embed one question, with the model's query prompt if it has one; a 1-D normalized vector. Questions
        asked at the same time from other threads go through the model together (rag.components.coalesce)."""
        return self._queries(text)

    def _embed_queries(self, texts: list[str]) -> Vectors:
        # One batch runs at a time (the Coalescer), so the first traces the model alone.
        if not self._trace_tried:
            from rag.components.traced import traced_queries  # torch: only where this embedder runs

            self._traced, self._trace_tried = traced_queries(self._model, self._library_queries), True
        rows = self._traced(texts) if self._traced is not None else self._library_queries(texts)
        rows.flags.writeable = False  # shared with whoever asks the same question next (Coalescer's memory)
        return rows

    def _library_queries(self, texts: list[str]) -> Vectors:
        """Questions' vectors by sentence-transformers' own encode (what the traced pass must equal)."""
        vectors = self._model.encode_query(texts, batch_size=len(texts), normalize_embeddings=True,
                                           convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)


def _placed_once(model: SentenceTransformer) -> SentenceTransformer:
    """The model in eval mode on its device, without re-checking either on every encode call."""
    # sentence-transformers puts the model in eval mode and compares every parameter's device with the target on
    # each call: 0.4 CPU ms for MiniLM and 0.8 for e5-small, of a 5 and 10 ms question (docs/performance.md). Here
    # a model is loaded once on RAG_EMBED_DEVICE and never moved or trained, so both are done once, here. Should
    # the library rename either method, the assignments add an unused attribute and nothing else changes.
    model.eval()
    device = model.device
    model._resolve_inference_device = lambda _device=None: device  # type: ignore[method-assign,misc]
    model.eval = lambda: model  # type: ignore[method-assign]
    return model
