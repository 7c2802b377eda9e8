"""Keyword search: tokenization, the persisted BM25 index kept in step with Chroma, fusion and its weights."""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from unittest.mock import ANY

import pytest

from ingest import service
from rag.components import keyword
from rag.components.keyword import KeywordIndex
from rag.components.keyword_snapshot import Snapshot
from rag.config import Settings
from rag.core.access import LOCAL_OPERATOR, DocAccess
from rag.core.ports import KeywordHit
from rag.core.retrieve import Fusion, Retriever, fuse, substance
from rag.core.text import cjk_share, tokenize
from rag.core.types import Chunk, Hit
from rag.wiring import build_retriever, build_store
from tests.conftest import REPO, STORE_MODES, CountingEmbedder

Write = Callable[[str, str | bytes], Path]


def _chunk(chunk_id: str, text: str, doc_id: str = "d") -> Chunk:
    return Chunk(chunk_id, text, "s.md", doc_id, "h", 0)


def test_tokens_are_stemmed_english_and_jieba_chinese_without_stopwords() -> None:
    assert tokenize("How do I configure the printers?") == ["configur", "printer"]
    assert tokenize("如何阻止软件包被升级？apt-mark hold") == ["阻止", "软件", "软件包", "升级", "apt", "mark", "hold"]
    assert cjk_share("软件包 apt") == pytest.approx(3 / 6)
    # Letters and digits of every script count; punctuation, spaces, full-width signs and underscores do not.
    assert cjk_share("1.2 版本（beta_2）：升级！Ärger ① x²") == pytest.approx(4 / 19)
    assert cjk_share("") == cjk_share("... ，。") == 0.0 and cjk_share("軟體豈") == 1.0


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



def test_substance_lowers_front_matter_and_contents_but_never_a_whole_sentence() -> None:
    title_page = Hit("t", "A Brief History of Debian\nDebian Documentation Project\nversion 2.23", "h.pdf", 0.9)
    contents = Hit("c", "Contents\n1.1 In the Beginning . . . . . 1\n1.2 Pronouncing Debian . . . 1", "h.pdf", 0.9)
    # A one-sentence document answers its question in full (tests/injection_corpus.py's parcel notice).
    parcel = Hit("p", "规定\n员工快递统一存放在一楼收发室，工作日九点到十七点可以领取。", "p.docx", 0.9,
                 headings="规定")
    sentence = Hit("s", "Intro\nThe Debian Project was officially founded by Ian Murdock in 1993.", "h.pdf", 0.9)
    assert substance(title_page) < 0.8 and substance(contents) < 0.5
    assert substance(parcel) == substance(sentence) == 1.0


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


# --- Snapshots and incremental updates (issue 16, part 3) ---

CORPUS = [*sorted((REPO / "data" / "eval" / "python-faq" / "docs").glob("*.txt")),
          REPO / "data" / "samples" / "zh" / "debian-faq-uptodate.md"]
QUERIES = ["Why does Python use indentation for grouping of statements?", "How do I read a file line by line?",
           "garbage collection memory", "string formatting", "如何保持系统更新", "软件包 升级 安全"]


def _corpus() -> list[Chunk]:
    """Real text in chunks of a few sentences (~700 of them: English FAQ answers and a Chinese Debian FAQ page)."""
    chunks: list[Chunk] = []
    for path in CORPUS:
        sentences = re.split(r"(?<=[.。!?])\s*", path.read_text(encoding="utf-8"))
        for n in range(0, len(sentences), 3):
            if text := " ".join(sentences[n : n + 3]).strip():
                chunks.append(_chunk(f"{path.stem}#{n}", text, path.stem))
    return chunks


def _bm25s_scores(chunks: Iterable[Chunk], query: str) -> dict[str, float]:
    """bm25s's Lucene scores, from a fresh index of these chunks (nonzero ones only)."""
    import bm25s

    ordered = sorted(chunks, key=lambda c: c.chunk_id)
    model = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    model.index([tokenize(c.text) or [""] for c in ordered], show_progress=False)
    scores = model.get_scores(tokenize(query))
    return {c.chunk_id: float(s) for c, s in zip(ordered, scores, strict=True) if s}


def _no_full_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """From here on, a write or a catch-up that rebuilds the whole index fails the test."""
    def refuse(*_: object) -> None:
        raise AssertionError("the whole keyword index was rebuilt")

    monkeypatch.setattr(keyword, "load", refuse)


def test_incremental_scores_equal_a_fresh_bm25s_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    chunks = _corpus()
    index = KeywordIndex(tmp_path / "kw.sqlite3")
    index.add(chunks[:200])
    index.warm()
    _no_full_loads(monkeypatch)  # every later write goes into the snapshot incrementally
    live = {c.chunk_id: c for c in chunks[:200]}
    for lo in range(200, len(chunks), 25):  # small writes: segments pile up and merge
        index.add(chunks[lo : lo + 25])
        live.update((c.chunk_id, c) for c in chunks[lo : lo + 25])
        gone = sorted(live)[lo % 7 :: 9]  # deletes: tombstones, then rebuilds without them
        index.delete(gone)
        for chunk_id in gone:
            del live[chunk_id]
    changed = [replace(c, text=c.text + " Python threads") for c in list(live.values())[::11]]
    index.add(changed)  # replaced in place: the old text must stop counting
    live.update((c.chunk_id, c) for c in changed)
    index.set_access(sorted(live)[::5], DocAccess(("hr",)))
    for query in QUERIES:
        expected = _bm25s_scores(live.values(), query)
        found = {hit.chunk_id: hit.score for hit in index.search(query, len(live))}
        assert found.keys() == expected.keys()
        assert all(found[i] == pytest.approx(expected[i], abs=1e-5) for i in expected), query
    monkeypatch.undo()
    reopened = KeywordIndex(tmp_path / "kw.sqlite3")  # the same state loaded whole: same scores
    for query in QUERIES:
        assert reopened.search(query, 10) == index.search(query, 10)


def test_searches_during_writes_never_mis_map_or_resurrect(tmp_path: Path) -> None:
    chunks = _corpus()[:260]
    text = {c.chunk_id: c.text for c in chunks}
    churn, doomed, secret = chunks[:150], chunks[150:210], chunks[210:]
    index = KeywordIndex(tmp_path / "kw.sqlite3")
    index.add(churn + doomed + [replace(c, access=DocAccess(("secret",))) for c in secret])
    index.warm()
    deleted: set[str] = set()  # ids whose delete has returned (never added again)
    stop, errors = threading.Event(), []

    def write() -> None:
        for n, chunk in enumerate(doomed):
            batch = churn[n % 10 :: 10]
            index.delete([c.chunk_id for c in batch])
            index.add(batch)
            index.set_access([c.chunk_id for c in batch], DocAccess(("a",) if n % 2 else ("b",)))
            index.delete([chunk.chunk_id])
            deleted.add(chunk.chunk_id)
        stop.set()

    def search() -> None:
        try:
            while not stop.is_set():
                for query in QUERIES:
                    gone = set(deleted)
                    hits = index.search(query, 20, include=sorted(gone)[:5], admits=lambda label: label != "|secret|")
                    terms = set(tokenize(query))
                    assert all(terms & set(tokenize(text[hit.chunk_id])) or hit.score == 0 for hit in hits)
                    assert not {hit.chunk_id for hit in hits} & (gone | {c.chunk_id for c in secret})
        except Exception as error:  # reported by the main thread
            errors.append(error)
            stop.set()

    readers = [threading.Thread(target=search) for _ in range(3)]
    writer = threading.Thread(target=write)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: a race shows up within a few writes
    try:
        for thread in [*readers, writer]:
            thread.start()
        for thread in [writer, *readers]:
            thread.join(timeout=60)
    finally:
        sys.setswitchinterval(switch)
    assert not errors, errors[0]
    assert len(deleted) == len(doomed) and all(index.search(c.text, 5)[0].chunk_id != c.chunk_id for c in doomed)
    assert index.visibility(lambda label: label == "|secret|")[0] == pytest.approx(50 / 200)


def test_a_reload_in_the_middle_of_a_search_leaves_its_results_alone(tmp_path: Path) -> None:
    chunks = _corpus()[:100]
    index, other = KeywordIndex(tmp_path / "kw.sqlite3"), KeywordIndex(tmp_path / "kw.sqlite3")
    index.add(chunks)
    before = index.search(QUERIES[0], 10)
    reloads: list[int] = []

    def admits(label: str) -> bool:  # runs mid-search: another process writes, and this one picks it up
        if not reloads:
            reloads.append(1)
            other.delete([c.chunk_id for c in chunks[:40:4]])
            other.add([_chunk("new", "Indentation groups statements in Python.")])
            index.warm()
        return True

    assert index.search(QUERIES[0], 10, admits=admits) == before  # the snapshot the search started with
    assert reloads and index.search(QUERIES[0], 10) != before


def test_another_instance_catches_up_from_the_change_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = KeywordIndex(tmp_path / "kw.sqlite3"), KeywordIndex(tmp_path / "kw.sqlite3")  # two processes
    writer.add([_chunk("a", "Reset the VPN token in the portal."), _chunk("b", "Printers use toner cartridges.")])
    reader.warm()
    _no_full_loads(monkeypatch)  # the reader reads only the rows that changed
    writer.add([_chunk("c", "The VPN portal moved to vpn.example.com.")])
    assert {hit.chunk_id for hit in reader.search("VPN portal", 5)} == {"a", "c"}
    writer.set_access(["c"], DocAccess(("it",)))
    assert [hit.chunk_id for hit in reader.search("VPN portal", 5, admits=lambda label: label == "open")] == ["a"]
    writer.delete(["a"])
    assert [hit.chunk_id for hit in reader.search("VPN portal", 5)] == ["c"]
    assert reader.visibility(lambda label: label == "open") == (0.5, ANY)
    monkeypatch.undo()
    with sqlite3.connect(tmp_path / "kw.sqlite3") as db:  # a writer without the log (older code): a full reload
        db.execute("DELETE FROM tokens WHERE chunk_id = 'c'")
        db.execute("UPDATE revision SET value = value + 1")
    assert reader.search("VPN portal", 5) == []


def test_a_large_change_loads_in_the_background(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = KeywordIndex(tmp_path / "kw.sqlite3"), KeywordIndex(tmp_path / "kw.sqlite3")
    writer.add([_chunk("a", "Reset the VPN token in the portal.")])
    reader.warm()
    monkeypatch.setattr(keyword, "INLINE_ROWS", 0)  # every change counts as large
    writer.add([_chunk("b", "The VPN portal moved.")])
    deadline = time.monotonic() + 10
    while len(reader.search("VPN portal", 5)) < 2:  # searches go on with the old snapshot until the new one is in
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_writes_during_a_background_compaction_are_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writer, reader = KeywordIndex(tmp_path / "kw.sqlite3"), KeywordIndex(tmp_path / "kw.sqlite3")
    writer.add([_chunk(str(i), f"Policy {i}: laptops are returned to IT.") for i in range(8)])
    reader.warm()
    real = keyword.compact

    def compact_while_another_process_writes(snapshot: Snapshot) -> Snapshot:
        writer.add([_chunk("new", "Laptops with cracked screens go to the repair desk.")])
        return real(snapshot)

    monkeypatch.setattr(keyword, "compact", compact_while_another_process_writes)
    writer.delete([str(i) for i in range(4)])  # half the slots dead: the reader compacts in the background
    assert len(reader.search("laptops", 10)) == 4
    assert reader._worker is not None
    reader._worker.join(timeout=10)
    assert {hit.chunk_id for hit in reader.search("laptops", 10)} == {"4", "5", "6", "7", "new"}


def test_chinese_tokenizing_prints_nothing() -> None:
    """jieba's dictionary loading is not shown to a reader (it logged to stderr before every Chinese answer)."""
    code = "from rag.components.keyword import tokenize; print(tokenize('什么是虚拟软件包？'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert "虚拟" in done.stdout
    assert done.stderr == ""
