"""The torch embedder: the same vectors as sentence-transformers' own encode, without its per-call device walk."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from sentence_transformers import SentenceTransformer

from rag.components.embedder import TorchEmbedder
from rag.components.models import BUNDLED_E5_MODEL, BUNDLED_EMBED_MODEL, resolve_embed_model
from rag.config import Settings
from rag.wiring import build_embedder

QUESTIONS = ["How do I request leave?", "年假怎么申请？", "What does the GIL protect in CPython?"]
PASSAGES = ["Leave is requested in the HR portal.", "word", "数据库需要定期清理以回收空间。" * 40]


def _walks(model: SentenceTransformer, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the model's parameter walks from now on."""
    walks = [0]
    parameters = model.parameters

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks[0] += 1
        return parameters(*args, **kwargs)

    monkeypatch.setattr(model, "parameters", counted)
    return walks


@pytest.mark.parametrize("name", [BUNDLED_EMBED_MODEL, BUNDLED_E5_MODEL])
def test_vectors_equal_the_librarys_encode_and_no_call_walks_the_parameters(
        name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    embedder = build_embedder(Settings(embed_model=name, embed_backend="torch", embed_dtype="float32",
                                       _env_file=None))  # type: ignore[call-arg]
    assert isinstance(embedder, TorchEmbedder)
    plain = SentenceTransformer(resolve_embed_model(name), device="cpu")
    embedder.embed_query("The first question traces the model, once.")
    ours, theirs = _walks(embedder._model, monkeypatch), _walks(plain, monkeypatch)
    for question in QUESTIONS:
        expected = plain.encode_query([question], normalize_embeddings=True, convert_to_numpy=True)[0]
        assert np.array_equal(embedder.embed_query(question), expected)
    expected = plain.encode_document(PASSAGES, normalize_embeddings=True, convert_to_numpy=True)
    assert np.array_equal(embedder.embed_documents(PASSAGES), expected)
    assert ours[0] == 0 and theirs[0] > 0  # the library walks every parameter per call; ours never does
    assert not embedder._model.training


@pytest.mark.parametrize("name", [BUNDLED_EMBED_MODEL, BUNDLED_E5_MODEL])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_questions_go_through_the_traced_pass_with_the_librarys_vectors(name: str, dtype: str) -> None:
    embedder = build_embedder(Settings(embed_model=name, embed_backend="torch", embed_dtype=dtype,
                                       _env_file=None))  # type: ignore[call-arg]
    assert isinstance(embedder, TorchEmbedder)
    embedder.embed_query(f"A question to {name} in {dtype}")  # the first question traces the model
    assert embedder._traced is not None
    batches = [[question] for question in QUESTIONS] + [QUESTIONS, [QUESTIONS[2], "Why?"]]
    for batch in batches:  # alone, and padded together (a mask with zeros), English and Chinese
        assert np.array_equal(embedder._traced(batch), embedder._library_queries(batch))
