"""Questions through a TorchScript trace of the embedding model: the library's vectors, bit for bit, for less CPU."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import numpy as np
import torch

from rag.core.ports import Vectors

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

log = logging.getLogger("rag.components.traced")

# Questions of two lengths, so that the traced pass is the padded batch's (a mask with zeros): a trace records one
# path through the model's Python, and a mask of ones alone may take another.
_TRACE_SAMPLE = ["How do I request leave?", "Which ports does the VPN client need open on the office network?"]
# Checked against the library's encode at load: alone, padded together, and Chinese.
_TRACE_CHECKS = [["Where is the printer?"], [*_TRACE_SAMPLE, "Why?"],
                 ["年假怎么申请？", "数据库需要定期清理以回收空间吗？"]]


class _SentenceForward(torch.nn.Module):
    """The model's modules (transformer, pooling, normalize) on a question batch's tensors: what is traced."""

    def __init__(self, model: SentenceTransformer, keys: tuple[str, ...]) -> None:
        super().__init__()
        self.model, self.keys = model, keys

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        embedding: torch.Tensor = self.model(dict(zip(self.keys, tensors, strict=True)))["sentence_embedding"]
        return embedding


class TracedQueries:
    """Questions' vectors through a TorchScript trace of the model's forward pass: the same operations (and the same
    vectors, bit for bit) run by TorchScript's interpreter instead of ~300 Python module calls a question, which
    were a quarter to a third of a short question's CPU (docs/performance.md)."""

    def __init__(self, model: SentenceTransformer, traced: torch.jit.ScriptModule, keys: tuple[str, ...]) -> None:
        self._model, self._traced, self._keys = model, traced, keys
        self._prompt = (model.prompts or {}).get("query")

    def __call__(self, texts: list[str]) -> Vectors:
        features = self._model.preprocess(texts, prompt=self._prompt)
        with torch.inference_mode():
            vectors = torch.nn.functional.normalize(self._traced(*(features[key] for key in self._keys)), p=2, dim=1)
        return np.asarray(vectors.float().numpy(), dtype=np.float32)


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """A logger's warnings off for the block."""
    found = logging.getLogger(logger)
    level = found.level
    found.setLevel(logging.ERROR)
    try:
        yield
    finally:
        found.setLevel(level)


def traced_queries(model: SentenceTransformer, library: Callable[[list[str]], Vectors]) -> TracedQueries | None:
    """The model's question pass traced, on the CPU, when it gives the library's vectors bit for bit on the checks;
    else None (the library's encode is used)."""
    if model.device.type != "cpu":
        return None  # on a GPU the launches, not Python, are the cost (docs/performance.md)
    try:
        prompt = (model.prompts or {}).get("query")
        sample = model.preprocess(_TRACE_SAMPLE, prompt=prompt)
        keys = tuple(key for key in ("input_ids", "attention_mask", "token_type_ids") if key in sample)
        with warnings.catch_warnings(), _quiet("sentence_transformers"), _quiet("transformers"), \
                torch.inference_mode():
            # The tracer's notes on Python values it records as constants, and the libraries' notices on the
            # attributes and settings the tracer reads: noise on every `rag ask`.
            warnings.simplefilter("ignore")
            traced = torch.jit.trace(  # type: ignore[no-untyped-call]
                _SentenceForward(model, keys).eval(), tuple(sample[key] for key in keys), strict=False,
                check_trace=False)
        queries = TracedQueries(model, traced, keys)
        if all(np.array_equal(queries(texts), library(texts)) for texts in _TRACE_CHECKS):
            return queries
    except Exception as exc:  # a model the tracer cannot follow: the library's encode, as before
        log.info("question pass not traced (%s: %s); using the library's encode", type(exc).__name__, exc)
    return None
