"""Keyword search: tokenization, the persisted BM25 index kept in step with Chroma, fusion and its weights."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from ingest import service
from rag.access import LOCAL_OPERATOR
from rag.config import Settings
from rag.keyword import KeywordHit, KeywordIndex, cjk_share, tokenize
from rag.retrieve import Fusion, Retriever, fuse
from rag.types import Chunk, Hit
from rag.wiring import build_retriever, build_store
from tests.conftest import STORE_MODES, CountingEmbedder

Write = Callable[[str, str | bytes], Path]


def _chunk(chunk_id: str, text: str, doc_id: str = "d") -> Chunk:
    return Chunk(chunk_id, text, "s.md", doc_id, "h", 0)


def test_tokens_are_stemmed_english_and_jieba_chinese_without_stopwords() -> None:
    assert tokenize("How do I configure the printers?") == ["configur", "printer"]
    assert tokenize("如何阻止软件包被升级？apt-mark hold") == ["阻止", "软件", "软件包", "升级", "apt", "mark", "hold"]
    assert cjk_share("软件包 apt") == pytest.approx(3 / 6)


def test_index_persists_updates_and_scores_coverage(tmp_path: Path) -> None:
    index = KeywordIndex(tmp_path / "kw.sqlite3")
    index.add([_chunk("a", "Reset the VPN token in the portal."), _chunk("b", "Printers use toner cartridges."),
               _chunk("c", "The cafeteria opens at noon.")])
    hits = index.search("How do I reset my VPN token?", 5)
    assert [hit.chunk_id for hit in hits] == ["a"]
    # Every question term once, in a chunk of about average length: 1 / (1 + k1) of the saturated maximum.
    assert hits[0].coverage == pytest.approx(1 / 2.5, rel=0.1)
    assert index.search("printer token", 5, include=["c"])[-1] == KeywordHit("c", 0.0, 0.0)
    index.delete(["a"])
    reopened = KeywordIndex(tmp_path / "kw.sqlite3")  # a restart: tokens come back from SQLite
    assert reopened.ids() == {"b", "c"}
    assert reopened.search("VPN token", 5) == []
    assert index.search("reset VPN", 5) == []  # the first instance reloads after the other's write


def test_questions_about_absent_things_cover_little(tmp_path: Path) -> None:
    index = KeywordIndex(tmp_path / "kw.sqlite3")
    index.add([_chunk(str(i), f"Policy {i}: laptops are returned to IT.") for i in range(10)])
    assert index.search("laptops returned", 1)[0].coverage == pytest.approx(0.4, rel=0.1)
    assert index.search("laptops quantum chromodynamics", 1)[0].coverage < 0.05


def test_fusion_weighs_cosine_and_coverage() -> None:
    dense = [Hit("a", "A", "a.md", 0.8), Hit("b", "B", "b.md", 0.6)]
    keyword = [KeywordHit("b", 7.0, 1.0), KeywordHit("c", 3.0, 0.5)]
    extra = [Hit("c", "C", "c.md", 0.1)]
    fused = fuse(dense, keyword, extra, weight=0.5)
    assert [(h.chunk_id, h.score) for h in fused] == [("b", 0.8), ("a", 0.4), ("c", 0.3)]
    assert fused[0].extra == {"dense": 0.6, "keyword": 1.0}


def test_dense_share_follows_language_and_keyword_margin() -> None:
    fusion = Fusion(dense_weight=0.8, dense_weight_cjk=0.1, margin_pull=0.5)
    flat = [KeywordHit(str(i), 1.0, 0.5) for i in range(5)]
    assert fusion.dense_share("How do I reset my VPN?", flat) == pytest.approx(0.8)
    assert fusion.dense_share("如何重置密码", flat) == pytest.approx(0.1)
    decisive = [KeywordHit("x", 9.0, 0.9)]  # one chunk covers the question, nothing else does
    assert fusion.dense_share("How do I reset my VPN?", decisive) == pytest.approx(0.8 - 0.45)
    assert fusion.dense_share("如何重置密码", decisive) == 0.0


@STORE_MODES
def test_ingest_keeps_keyword_index_in_step_with_chroma(docs: Path, write: Write, settings: Settings,
                                                       embedder: CountingEmbedder) -> None:
    write("errors.md", "# Errors\nError E4031 means the badge reader lost its network link.")
    write("leave.md", "# Leave\nStaff get 25 days of annual leave per year.")
    service.sync([docs], settings, embedder=embedder)
    store = build_store(settings)
    assert store.keyword is not None and store.keyword.ids() == store.all_ids()
    retriever = build_retriever(settings, embedder=embedder, store=store)
    assert retriever.search("What does E4031 mean?", 1, LOCAL_OPERATOR)[0].source == "errors.md"
    write("errors.md", "# Errors\nError E5000 means the printer is out of paper.")
    (docs / "leave.md").unlink()
    service.sync([docs], settings, embedder=embedder)
    assert store.keyword.ids() == store.all_ids()
    assert all("E4031" not in hit.text for hit in retriever.search("What does E4031 mean?", 3, LOCAL_OPERATOR))
    # A keyword index lost (or older than keyword search) is rebuilt from Chroma by the next sync.
    store.keyword.delete(sorted(store.keyword.ids()))
    service.sync([docs], settings, embedder=embedder)
    assert store.keyword.ids() == store.all_ids()


def test_dense_mode_ignores_keywords(docs: Path, write: Write, settings: Settings,
                                     embedder: CountingEmbedder) -> None:
    write("a.md", "# A\nZX-81 adapter firmware notes.")
    service.sync([docs], settings, embedder=embedder)
    dense = Retriever(embedder, build_store(settings), mode="dense")
    hybrid = Retriever(embedder, build_store(settings), mode="hybrid")
    assert "keyword" not in dense.search("ZX-81 firmware", 1, LOCAL_OPERATOR)[0].extra
    assert hybrid.search("ZX-81 firmware", 1, LOCAL_OPERATOR)[0].extra["keyword"] > 0.3
