"""Chunks never exceed the embedder's window, counted in its own tokenizer; Chinese splits on its punctuation."""

from __future__ import annotations

import pytest

from ingest.chunker import chunk_document
from ingest.loaders import LoadedDoc, Section
from ingest.parse import token_counter
from rag.components.embedder import TorchEmbedder
from rag.components.models import resolve_embed_model
from rag.components.onnx_embedder import OnnxEmbedder
from rag.config import Settings
from rag.core.ports import Embedder
from rag.wiring import build_embedder

COUNT = token_counter(resolve_embed_model("bundled:all-MiniLM-L6-v2"))


def _chunks(text: str, size: int = 120, overlap: int = 20, headings: tuple[str, ...] = ()) -> list[str]:
    doc = LoadedDoc(title="t", sections=[Section(text, headings=headings)])
    return [piece.text for piece in chunk_document(doc, COUNT, size, overlap, 254)]


@pytest.mark.parametrize("backend", ["onnx", "torch"])
def test_embedder_window_is_minilm_256_minus_specials(backend: str) -> None:
    embedder = build_embedder(Settings(embed_model="bundled:all-MiniLM-L6-v2", embed_backend=backend,
                                       _env_file=None))  # type: ignore[call-arg,arg-type]
    assert embedder.max_tokens == 254
    # The parse worker's counter (tokenizers alone) agrees with the tokenizer each backend itself runs.
    assert COUNT("hello world, 你好") == len(_model_tokens(embedder, "hello world, 你好")) == 5


def _model_tokens(embedder: Embedder, text: str) -> list[int]:
    if isinstance(embedder, OnnxEmbedder):
        return list(embedder._tokenizer.encode(text, add_special_tokens=False).ids)
    assert isinstance(embedder, TorchEmbedder)
    return list(embedder._model.tokenizer(text, add_special_tokens=False)["input_ids"])


def test_no_chunk_exceeds_size_for_prose_chinese_and_unbroken_text() -> None:
    texts = [
        "The quick brown fox jumps over the lazy dog. " * 400,
        "数据库需要定期清理以回收空间。" * 300,
        "无标点的中文文本" * 500,
        "x" * 20000,
        "https://example.com/" + "a/b-c_d" * 3000,
    ]
    for text in texts:
        chunks = _chunks(text, headings=("Guide", "Section"))
        assert len(chunks) > 3
        assert max(COUNT(c) for c in chunks) <= 120
        assert all(c.startswith("Guide > Section\n") for c in chunks)


def test_chinese_chunks_end_at_sentence_punctuation() -> None:
    text = "".join(f"第{i}条规定员工每年享有带薪年假。" for i in range(200))
    chunks = _chunks(text, size=60, overlap=0)
    assert len(chunks) > 5
    assert all(c.endswith("。") for c in chunks)


def test_overlap_repeats_text_between_neighbours() -> None:
    chunks = _chunks(" ".join(f"Sentence number {i} is here." for i in range(300)), size=80, overlap=30)
    first_tail = chunks[0].split()[-4:]
    assert " ".join(first_tail) in chunks[1]


def test_short_text_is_one_chunk() -> None:
    assert _chunks("Short policy.") == ["Short policy."]
