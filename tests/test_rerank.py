"""The optional cross-encoder reranker, with a real (if untrained) CrossEncoder built offline from the bundled MiniLM:
no reranker ships offline, so this checks the wiring and the ordering contract, not ranking quality."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import service
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR
from rag.core.errors import ConfigError
from rag.wiring import build_reranker, build_retriever, tokenizer_path
from tests.conftest import CountingEmbedder

Write = Callable[[str, str | bytes], Path]


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    source = tokenizer_path(Settings(_env_file=None).embed_model)  # type: ignore[call-arg]
    target = tmp_path_factory.mktemp("cross-encoder")
    AutoModelForSequenceClassification.from_pretrained(source, num_labels=1).save_pretrained(target)
    AutoTokenizer.from_pretrained(source).save_pretrained(target)
    return target


def test_reranker_reorders_candidates_and_keeps_the_fused_score(docs: Path, write: Write, settings: Settings,
                                                                 embedder: CountingEmbedder,
                                                                 cross_encoder_dir: Path) -> None:
    for i in range(6):
        write(f"n{i}.md", f"# Note {i}\nThe office plant number {i} needs water on Mondays.")
    service.sync([docs], settings, embedder=embedder)
    plain = build_retriever(settings, embedder=embedder)
    reranked = build_retriever(settings.model_copy(update={"rerank_model": str(cross_encoder_dir)}), embedder=embedder)
    question = "Which plant needs water?"
    before, after = plain.search(question, 6, LOCAL_OPERATOR), reranked.search(question, 6, LOCAL_OPERATOR)
    assert {hit.chunk_id for hit in before} == {hit.chunk_id for hit in after}
    rerank_scores = [hit.extra["rerank"] for hit in after]
    assert rerank_scores == sorted(rerank_scores, reverse=True)
    fused = {hit.chunk_id: hit.score for hit in before}
    assert all(hit.score == fused[hit.chunk_id] for hit in after)  # refusal still reads the fused score


def test_unloadable_reranker_is_a_config_error(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, rerank_model=str(tmp_path / "missing"), _env_file=None)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="RAG_RERANK_MODEL"):
        build_reranker(settings)
